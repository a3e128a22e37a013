/**
 * Leases and crash recovery: this replica's heartbeat, the judgement of which replicas are dead, and the takeover
 * of the unfinished tasks they left (re-run when declared safe, failed with the reason otherwise).
 *
 * A stalled store is a failure, not a wait:
 * - Every heartbeat has a deadline; a miss closes the store gate (store-health.ts: requests fail fast, retryable).
 * - Self-fencing: `leaseMs` (less half a heartbeat, for a late timer) after the last heartbeat that reached the store
 *   was *sent* (never later than the peers could judge it, since they measure from when it was written), the runs
 *   here are stopped without waiting for the
 *   store, and the replica reports not ready. When the store answers again, each stopped run whose task still
 *   belongs to this replica is taken back: re-run if retry-safe, failed saying why otherwise; a task a peer took
 *   over is left to it.
 * - No peer is judged by a heartbeat it could not have written: this replica judges leases only once its own
 *   heartbeats have reached the store without a miss for a whole lease, and only from a listing in which its own
 *   heartbeat is fresh on the store's clock (a listing answered late, after a stall, shows every heartbeat old,
 *   this one's included). Ages are the store's (PostgreSQL `now() - heartbeat_at`). A whole-database outage or stall
 *   therefore causes no takeover: after it, every replica waits a lease, during which the live ones heartbeat.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import { ErrorCode, isTerminal, type JsonRpcErrorObject } from '../protocol/index.js';
import { TaskWriteRefused, type NewAlert, type Outcome, type ReplicaInfo, type StepWrite, type TaskRecord, type TaskStore } from '../store/types.js';
import { newAlertId } from '../store/ops-rows.js';
import type { SignalBus } from '../store/local-bus.js';
import type { Execution } from './execution.js';
import type { StoreHealth } from './store-health.js';
import type { Logger, RegisteredTool, RuntimeAlert } from './types.js';

/**
 * Where this process runs, precise enough that a pid means the same process to every replica with the same value:
 * host name, boot id and PID namespace (two containers may share a host name, two machines the same initial
 * namespace). Where these cannot be read, the host name alone, and pids are not trusted (only leases are).
 */
function hostIdentity(): string {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const ns = readlinkSync('/proc/self/ns/pid');
    return `${hostname()}/${boot}/${ns}`;
  } catch {
    return `${hostname()}/?${randomBytes(6).toString('hex')}`;
  }
}
export const HOST = hostIdentity();

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** What recovery needs from the runtime. */
export interface RecoveryHost {
  readonly store: TaskStore;
  readonly log: Logger;
  readonly replicaId: string;
  /** Told of the other replicas registered (a bus sends nothing while no other process listens). */
  readonly bus: SignalBus;
  /** Whether the heartbeats reach the store (this module keeps it). */
  readonly health: StoreHealth;
  readonly isStopping: boolean;
  /** Task executions running here, by id. */
  readonly running: Map<string, Execution>;
  tool(name: string): RegisteredTool | undefined;
  /** Runs the handler again for a record this replica now owns. */
  rerun(rec: TaskRecord, tool: RegisteredTool): void;
  finishQuietly(taskId: string, outcome: Outcome, message: string): Promise<void>;
  alert(a: RuntimeAlert): void;
  /** Fallback for missed cancel signals. */
  checkPendingCancels(): Promise<void>;
}

export interface LeaseOptions {
  heartbeatMs: number;
  leaseMs: number;
  maxAttempts: number;
  /** A heartbeat not answered within this counts as a store failure. */
  heartbeatDeadlineMs: number;
}

/** Why a task of this replica has no run here until the store answers: its run was stopped by the self-fence, or
 *  ended because the store did not answer one of its writes (`outage`), or its creation's answer never came. */
export type StoppedWhy = 'fenced' | 'outage' | 'doubtful';

interface Stopped {
  /** `lost`: a dead peer's task whose takeover got no answer (it may be this replica's now). */
  why: StoppedWhy | 'lost';
  handlerEnded: () => boolean;
  since: number;
  /** Ends of steps the stopped run could not store, written when this replica claims the task again. */
  carried: () => StepWrite[];
}

/** A heartbeat still unanswered at its deadline (as opposed to one the store answered with an error). */
class DeadlineMissed extends Error {}

/** Rejects when `p` has not settled within `ms` (the promise itself is left to its own deadline). */
function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DeadlineMissed(`${what}: no answer from the store within ${ms} ms`)), ms))),
  ]).finally(() => clearTimeout(timer));
}

export class Recovery {
  private recovering: Promise<void> | undefined;
  private ended = false;
  /** Heartbeats in flight: a hung one does not hold back the next (that one may find the store back already). */
  private beating = 0;
  private afterBeat: Promise<void> | undefined;
  private fenceTimer: NodeJS.Timeout | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  /** Tasks of this replica with no run here and an open fate, until the store tells who owns them now: runs it
   *  stopped when it fenced itself, and creations whose answer the store did not give in time. */
  private readonly stopped = new Map<string, Stopped>();

  /** As many heartbeats as can hang within a deadline, plus one that may find the store back. */
  private readonly maxInFlight: number;
  /** Runs stop this long before the lease ends: a late timer must not let a peer's takeover come first. */
  private readonly fenceMarginMs: number;

  constructor(private readonly host: RecoveryHost, private readonly opts: LeaseOptions) {
    this.maxInFlight = Math.min(3, Math.ceil(opts.heartbeatDeadlineMs / opts.heartbeatMs) + 1);
    this.fenceMarginMs = Math.floor(opts.heartbeatMs / 2);
  }

  async register(): Promise<void> {
    const now = Date.now();
    const sentAt = performance.now();
    await this.host.store.registerReplica({ replicaId: this.host.replicaId, host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
    this.beatSucceeded(sentAt);
  }

  /** Stops the lease timers and heartbeats (shutdown, once the drain is over: heartbeats go on while it drains). */
  stop(): void {
    this.ended = true;
    clearTimeout(this.fenceTimer);
    clearTimeout(this.probeTimer);
  }

  /** One heartbeat: renew the lease (within its deadline), then catch missed cancels and take over what dead
   *  replicas left (not while this replica stops: it takes nothing new). */
  async tick(): Promise<void> {
    if (this.ended || this.beating >= this.maxInFlight) return;
    this.beating++;
    const sentAt = performance.now();
    let alive: boolean;
    const beat = this.host.store.heartbeat(this.host.replicaId, Date.now());
    try {
      alive = await withDeadline(beat, this.opts.heartbeatDeadlineMs, 'heartbeat');
    } catch (e) {
      // Answered after its deadline, it still reached the store, and no earlier than it was sent: it renews the lease
      // from then (a loaded store may take longer than the deadline to open a connection after an outage).
      if (e instanceof DeadlineMissed) void beat.then((late) => this.arrived(sentAt, late), () => undefined);
      // A miss counts unless a heartbeat sent after it has reached the store meanwhile. A late one counts only when the
      // store answered nothing else within the deadline either: a store busy with a burst of requests is not gone (the
      // lease is still only renewed by heartbeats that arrive, so self-fencing stays on time).
      const health = this.host.health;
      const busyNotGone = e instanceof DeadlineMissed && health.answeredWithin(this.opts.heartbeatDeadlineMs);
      if ((health.lastBeatSentAt ?? -Infinity) < sentAt && !busyNotGone) this.beatFailed(e);
      return;
    } finally {
      this.beating--;
    }
    this.arrived(sentAt, alive);
  }

  /** A heartbeat sent at `sentAt` reached the store, in time or late; `alive`: this replica's row was still there. */
  private arrived(sentAt: number, alive: boolean): void {
    if (this.ended || (this.host.health.lastBeatSentAt ?? -Infinity) > sentAt) return; // a later one already counted
    this.beatSucceeded(sentAt);
    // The lease work may take longer than a heartbeat; it never delays the next one.
    this.afterBeat ??= this.leaseWork(alive).finally(() => (this.afterBeat = undefined));
  }

  private async leaseWork(alive: boolean): Promise<void> {
    try {
      if (!alive) await this.presumedDead();
      // Draining: nothing is taken back or over here (the other replicas take it).
      const taking = !this.host.isStopping;
      if (taking && this.stopped.size > 0) await this.takeBackStopped();
      // Fallback for missed signals: a cancel recorded by another process reaches the handler within a heartbeat.
      await this.host.checkPendingCancels();
      if (taking) await this.recover();
    } catch (e) {
      this.host.log.error('lease check failed', { error: String(e) });
    }
  }

  private beatSucceeded(sentAt: number): void {
    const { health, log } = this.host;
    const wasFenced = health.fenced;
    const wasFailing = health.failing;
    health.beatSucceeded(sentAt);
    health.fenced = false;
    if (wasFenced) log.warn('the store answers again: this replica is ready again and takes back the runs it stopped, unless a peer took them over');
    else if (wasFailing) log.info('the store answers heartbeats again');
    // Self-fencing: a whole lease after this heartbeat was sent, unless another one reaches the store first.
    clearTimeout(this.fenceTimer);
    this.fenceTimer = setTimeout(() => this.selfFence(), Math.max(0, sentAt + this.opts.leaseMs - this.fenceMarginMs - performance.now()));
    this.fenceTimer.unref?.();
  }

  private beatFailed(e: unknown): void {
    const { health, log } = this.host;
    if (!health.failing) {
      log.error(
        `heartbeat failed: requests that need the store are refused until it answers; this replica stops its runs if no heartbeat reaches the store for its lease (${this.opts.leaseMs} ms)`,
        { error: String((e as Error)?.message ?? e) },
      );
    }
    health.beatFailed(String((e as Error)?.message ?? e));
    // Probe sooner than a slow heartbeat would, so the replica is back soon after the store is.
    if (this.opts.heartbeatMs > 1000 && !this.ended) {
      clearTimeout(this.probeTimer);
      this.probeTimer = setTimeout(() => void this.tick(), 1000);
      this.probeTimer.unref?.();
    }
  }

  /**
   * No heartbeat reached the store for a whole lease: the peers may judge this replica dead and take its tasks.
   * Every run here stops now, without waiting for the store (a run that already returned keeps trying to write
   * its outcome, which the store refuses if the task changed hands).
   */
  private selfFence(): void {
    const { health, log, running } = this.host;
    if (this.ended || health.fenced) return;
    health.fenced = true;
    const ids: string[] = [];
    for (const [taskId, exec] of [...running]) {
      ids.push(taskId);
      let ended = false;
      void exec.done?.then(() => (ended = true));
      this.stopped.set(taskId, { why: 'fenced', handlerEnded: () => ended, since: performance.now(), carried: () => exec.carriedSteps() });
      running.delete(taskId);
      exec.lostOwnership('no heartbeat reached the store for a whole lease; stopping this run (a peer may take the task over)');
    }
    const age = Math.round(health.lastBeatAgeMs() ?? this.opts.leaseMs);
    log.error(`self-fenced: no heartbeat reached the store for ${age} ms (lease ${this.opts.leaseMs} ms); stopped ${ids.length} runs this replica may no longer own; not ready until the store answers`, {
      taskIds: ids.slice(0, 50),
    });
  }

  /** A task of this replica that nothing runs: once the store answers, it is re-run or failed like a stopped run. */
  settleLater(taskId: string, why: Stopped['why'], carried: () => StepWrite[] = () => []): void {
    if (this.stopped.size < 100_000) this.stopped.set(taskId, { why, handlerEnded: () => true, since: performance.now(), carried });
  }

  /** After a self-fence (or a creation with no answer): each such task still this replica's is re-run or failed
   *  (never both, never stuck); a task a peer took over meanwhile is the peer's. */
  private async takeBackStopped(): Promise<void> {
    for (const [taskId, { why, handlerEnded, since, carried }] of [...this.stopped]) {
      // Not while the stopped handler still runs (it ignores its signal): a re-run would be a second run at once.
      // One that never ends is given up on after a lease, as a peer would.
      if (!handlerEnded() && performance.now() - since < this.opts.leaseMs * 2) continue;
      let rec: TaskRecord;
      try {
        rec = await this.host.store.takeOver(taskId, this.host.replicaId, this.host.replicaId, Date.now());
      } catch (e) {
        if (!(e instanceof TaskWriteRefused)) throw e; // the store failed again: the next heartbeat retries
        this.stopped.delete(taskId);
        continue;
      }
      // Still this replica's: nobody ran it meanwhile, so the steps the stopped run ended are stored now, under this
      // claim, and the next run replays them instead of running them again (or finding them interrupted).
      for (const w of carried()) {
        await this.host.store.writeStep(taskId, { owner: this.host.replicaId, epoch: rec.epoch }, w).catch((e: unknown) => {
          if (!(e instanceof TaskWriteRefused)) throw e; // refused: cancelled or ended meanwhile, which resume() reads
        });
      }
      this.stopped.delete(taskId);
      await this.resume(rec, why);
    }
  }

  /**
   * Our replica row is gone: the others saw no heartbeat for a whole lease (this process was paused, or cut off
   * from the store) and may have taken our tasks. Runs whose task now belongs to someone else stop without writing;
   * the rest carry on, and the replica registers again.
   */
  private async presumedDead(): Promise<void> {
    const { store, log, replicaId, running } = this.host;
    log.warn('this replica was presumed dead (no heartbeat for a whole lease); checking which tasks it still owns');
    const now = Date.now();
    await store.registerReplica({ replicaId, host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
    for (const [taskId, exec] of [...running]) {
      const l = await store.get(taskId);
      if (l.state !== 'found' || l.record.owner !== replicaId || l.record.epoch !== exec.epoch || isTerminal(l.record.status)) {
        exec.lostOwnership();
        running.delete(taskId);
      }
    }
  }

  /** Takes over unfinished tasks of dead replicas: re-run when declared safe, failed with the reason otherwise. */
  recover(): Promise<void> {
    this.recovering ??= this.doRecover().finally(() => (this.recovering = undefined));
    return this.recovering;
  }

  private async doRecover(): Promise<void> {
    const { store, log, replicaId, health } = this.host;
    const now = Date.now();
    const { leaseMs, heartbeatMs, heartbeatDeadlineMs } = this.opts;
    const replicas = await store.listReplicas();
    const ageOf = (r: ReplicaInfo) => r.heartbeatAgeMs ?? Math.max(0, now - r.heartbeatAt);
    const mine = replicas.find((r) => r.replicaId === replicaId);
    // Leases are judged only when every peer had a whole lease of a reachable store to heartbeat in (ours reached it
    // all along), and only from a listing that is not a late answer after a stall (our own heartbeat is fresh in it).
    const judgeStale = health.reachableForMs() > leaseMs && mine !== undefined && ageOf(mine) <= heartbeatMs + heartbeatDeadlineMs;
    const live: string[] = [];
    for (const r of replicas) {
      const age = ageOf(r);
      // A replica in this very PID namespace whose process is gone is dead at once (outage or not); elsewhere only
      // the lease tells.
      const dead = r.replicaId !== replicaId && ((judgeStale && age > leaseMs) || (r.host === HOST && !pidAlive(r.pid)));
      if (dead) {
        log.warn('replica presumed dead; taking over its tasks', { replicaId: r.replicaId, heartbeatAgeMs: Math.round(age) });
        // The row's removal and the alert are one transaction: whichever replica judges first writes the alert.
        await store.ops.replicaLost(r.replicaId, replicaLostAlert(r, replicaId, age, now));
      } else live.push(r.replicaId);
    }
    if (!live.includes(replicaId)) live.push(replicaId);
    // Replicas of an earlier version listen without saying so: the registry keeps this one's signals going to them.
    if (live.length > 1) this.host.bus.notePeers?.(3 * heartbeatMs);
    for (;;) {
      const orphans = await store.listOrphans(live, 100);
      if (orphans.length === 0) break;
      for (const o of orphans) await this.adopt(o);
      if (orphans.length < 100) break;
    }
  }

  private async adopt(orphan: TaskRecord): Promise<void> {
    const host = this.host;
    let rec: TaskRecord;
    try {
      rec = await host.store.takeOver(orphan.taskId, orphan.owner, host.replicaId, Date.now());
    } catch (e) {
      if (e instanceof TaskWriteRefused) return; // someone else took it, or it finished
      // The takeover may have committed with its answer lost: then no listing of orphans shows the task again (its
      // owner is this live replica), so it is taken back like a stopped run; if it did not commit, that is refused
      // and the next recovery finds the orphan again.
      this.settleLater(orphan.taskId, 'lost');
      throw e;
    }
    await this.resume(rec, 'lost');
  }

  /** A task this replica now holds again (a dead peer's, or one of its own stopped runs): cancelled if that was
   *  asked, re-run when declared safe, failed with the reason otherwise. */
  private async resume(rec: TaskRecord, why: 'lost' | StoppedWhy): Promise<void> {
    const host = this.host;
    const tool = host.tool(rec.tool);
    const maxAttempts = tool?.spec.maxAttempts ?? this.opts.maxAttempts;
    if (rec.cancelRequestedAt !== null) {
      await host.finishQuietly(rec.taskId, { status: 'cancelled' }, 'Cancelled: the server running it stopped after the cancel request');
      return;
    }
    const failure = whyNotRerun(rec, tool, maxAttempts, why === 'lost' ? undefined : { why, leaseMs: this.opts.leaseMs });
    if (failure || !tool) {
      const error = await namingStep(host.store, rec.taskId, failure ?? notRegistered(rec));
      host.alert({ kind: 'worker-lost', taskId: rec.taskId, tool: rec.tool, message: error.message });
      await host.finishQuietly(rec.taskId, { status: 'failed', error }, error.message);
      return;
    }
    host.log.info('re-running task after a crash', { taskId: rec.taskId, tool: rec.tool, attempt: rec.attempts });
    host.rerun(rec, tool);
  }
}

/** A failure after a lost worker names the step that was running then, if a step was (its effect may have happened). */
async function namingStep(store: TaskStore, taskId: string, error: JsonRpcErrorObject): Promise<JsonRpcErrorObject> {
  const running = (await store.listSteps(taskId).catch(() => [])).filter((s) => s.state === 'started').map((s) => s.key);
  if (running.length === 0) return error;
  return {
    ...error,
    message: `${error.message} (step ${running.map((k) => `"${k}"`).join(', ')} was running; it may or may not have had its effect)`,
    data: { ...(error.data as object), step: running[0]! },
  };
}

function notRegistered(rec: TaskRecord): JsonRpcErrorObject {
  return {
    code: ErrorCode.InternalError,
    message: `The server running this task stopped, and tool "${rec.tool}" is no longer registered here, so it cannot be re-run`,
    data: { reason: 'worker_lost', attempts: rec.attempts - 1 },
  };
}

/** Why a task whose worker was lost is failed instead of re-run (undefined: re-run it). */
function whyNotRerun(
  rec: TaskRecord,
  tool: RegisteredTool | undefined,
  maxAttempts: number,
  store?: { why: StoppedWhy; leaseMs: number },
): JsonRpcErrorObject | undefined {
  if (!tool) return notRegistered(rec);
  if (!rec.retrySafe && store) {
    const what = store.why === 'fenced'
      ? `The server running this task could not reach its task store for longer than its lease (${store.leaseMs} ms), so it stopped the run (another replica could have taken it over)`
      : store.why === 'outage'
        ? `The server running this task could not reach its task store: a write of the run got no answer for longer than its lease (${store.leaseMs} ms), so the run stopped`
        : 'The task store stored this task but did not answer its creation in time, so the caller was told to retry and nothing ran it';
    return {
      code: ErrorCode.InternalError,
      message: `${what}; "${rec.tool}" is not declared safe to re-run, so it was not restarted`,
      data: { reason: 'store_unreachable', attempts: rec.attempts - 1 },
    };
  }
  if (!rec.retrySafe) {
    return {
      code: ErrorCode.InternalError,
      message: `The server process running this task stopped before it finished${tool.spec.lostWork ? ` (${tool.spec.lostWork} was lost with it)` : ''}; "${rec.tool}" is not declared safe to re-run, so it was not restarted`,
      data: { reason: 'worker_lost', attempts: rec.attempts - 1 },
    };
  }
  if (rec.attempts > maxAttempts) {
    return {
      code: ErrorCode.InternalError,
      message: `The server running this task stopped ${rec.attempts - 1} times; giving up after ${maxAttempts} attempts`,
      data: { reason: 'attempts_exhausted', attempts: rec.attempts - 1 },
    };
  }
  return undefined;
}

function replicaLostAlert(r: ReplicaInfo, judgedBy: string, ageMs: number, now: number): NewAlert {
  return {
    alertId: newAlertId(),
    dedupeKey: `replica-lost:${r.replicaId}`,
    kind: 'replica-lost',
    message: `replica ${r.replicaId} (pid ${r.pid}) is lost: no heartbeat for ${Math.round(ageMs / 1000)} s or its process is gone; its unfinished tasks are being taken over`,
    destination: 'alerts',
    data: { replicaId: r.replicaId, pid: r.pid, heartbeatAgeMs: Math.round(ageMs), judgedBy },
    createdAt: now,
  };
}
