/**
 * Leases and crash recovery: this replica's heartbeat, the judgement of which replicas are dead, and the takeover
 * of the unfinished tasks they left (re-run when declared safe, failed with the reason otherwise).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import { ErrorCode, isTerminal, type JsonRpcErrorObject } from '../protocol/index.js';
import { TaskWriteRefused, type NewAlert, type Outcome, type ReplicaInfo, type TaskRecord, type TaskStore } from '../store/types.js';
import { newAlertId } from '../store/ops-rows.js';
import type { Execution } from './execution.js';
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
}

export class Recovery {
  /** When this replica last failed to reach the store (its heartbeat or its lease check). */
  private storeFailedAt = 0;
  private recovering: Promise<void> | undefined;

  constructor(private readonly host: RecoveryHost, private readonly opts: LeaseOptions) {}

  register(): Promise<void> {
    const now = Date.now();
    return this.host.store.registerReplica({ replicaId: this.host.replicaId, host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
  }

  /** One heartbeat: renew the lease, catch missed cancels, take over what dead replicas left. */
  async tick(): Promise<void> {
    if (this.host.isStopping) return;
    try {
      if (!(await this.host.store.heartbeat(this.host.replicaId, Date.now()))) await this.presumedDead();
      // Fallback for missed signals: a cancel recorded by another process reaches the handler within a heartbeat.
      await this.host.checkPendingCancels();
      await this.recover();
    } catch (e) {
      this.storeFailedAt = Date.now();
      this.host.log.error('heartbeat failed', { error: String(e) });
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
    await this.register();
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
    const { store, log, replicaId } = this.host;
    const now = Date.now();
    const { leaseMs } = this.opts;
    // Just back from an outage of the store: the others may not have been able to heartbeat either. Give them a
    // whole lease to do so before judging anyone by a stale heartbeat.
    const judgeStale = now - this.storeFailedAt > leaseMs;
    const replicas = await store.listReplicas();
    const live: string[] = [];
    for (const r of replicas) {
      const age = now - r.heartbeatAt;
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
      throw e;
    }
    const tool = host.tool(rec.tool);
    const maxAttempts = tool?.spec.maxAttempts ?? this.opts.maxAttempts;
    if (rec.cancelRequestedAt !== null) {
      await host.finishQuietly(rec.taskId, { status: 'cancelled' }, 'Cancelled: the server running it stopped after the cancel request');
      return;
    }
    const failure = whyNotRerun(rec, tool, maxAttempts);
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
function whyNotRerun(rec: TaskRecord, tool: RegisteredTool | undefined, maxAttempts: number): JsonRpcErrorObject | undefined {
  if (!tool) return notRegistered(rec);
  if (!rec.retrySafe) {
    return {
      code: ErrorCode.InternalError,
      message: `The server process running this task stopped before it finished; "${rec.tool}" is not declared safe to re-run, so it was not restarted`,
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
