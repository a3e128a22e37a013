/**
 * Capacity: admission control and the run queue.
 *
 * - Admission (per call): a call starts here now when this replica has a free handler slot
 *   (`maxRunning`, and the tool's `limit.perReplica`) and nothing waits in the queue; otherwise a call whose caller
 *   can follow a task (or a handle) is stored queued (persist, then answer, as always) and any replica with room
 *   claims it; a call that can follow nothing is refused with a retry time (never accepted and then dropped). A tool
 *   with a deployment-wide limit always goes through the queue: only the store can count its runs everywhere.
 * - Back-pressure: past `maxQueued` tasks waiting in the whole deployment, new calls are refused with a retry time.
 * - Draining: one claim in flight at a time, taking as many tasks as there are free slots (at most claimBatch), by the
 *   store's claim rule (oldest first, fair between principals, never a cancelled or expired task, deployment-wide
 *   limits respected), whenever a slot frees here, queued work or a freed deployment-wide slot is signalled by any
 *   replica, or the slow fallback poll fires.
 * - Parked tasks (parking.ts) are resumed by the same claim once due: an answer signals the queue, and a WakeTimer
 *   (durable-time.ts) wakes this replica when the earliest parked task's time comes.
 */
import { missingTasksCapability, serverBusy, type CreateTaskResult, type JsonObject, type TaskProtocolError } from '../protocol/index.js';
import { QUEUE_SIGNAL_ID, type SignalBus, type SignalKind } from '../store/local-bus.js';
import type { TaskRecord, TaskStore, TaskView } from '../store/types.js';
import { WakeTimer } from './durable-time.js';
import { PrincipalBounds, type PrincipalBoundOptions } from './principal-bounds.js';
import { creationFailure, newTaskFor, type Execution } from './execution.js';
import type { CallContext, CallOutcome, Logger, RegisteredTool, Slot } from './types.js';

/** What the queue needs from the runtime. */
export interface QueueHost {
  readonly store: TaskStore;
  readonly bus: SignalBus;
  readonly log: Logger;
  readonly replicaId: string;
  readonly isStopping: boolean;
  readonly defaultTtlMs: number | null;
  readonly defaultPollIntervalMs: number;
  tool(name: string): RegisteredTool | undefined;
  toolNames(): string[];
  publish(taskId: string, kind?: SignalKind): void;
  createResult(rec: TaskRecord): CreateTaskResult;
  /** Runs the handler of a task this replica now owns, in `slot`. */
  rerun(rec: TaskRecord, tool: RegisteredTool, slot?: Slot): void;
  /** Whether a run of this task is under way here. */
  runsHere(taskId: string): boolean;
}

export interface CapacityOptions extends PrincipalBoundOptions {
  maxRunning: number;
  toolLimits: Record<string, number>;
  maxQueued: number;
  queuePollMs: number;
  /** Most queued tasks one claim takes (when this replica has room for them). */
  claimBatch: number;
}

const clamp = (x: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, Math.round(x)));

export class RunQueue {
  /** Handlers running here, and slots taken for handlers about to start. */
  private running = 0;
  private reserved = 0;
  /** Per tool: running here plus reserved. */
  private readonly perTool = new Map<string, number>();
  private readonly startedAt = new WeakMap<Execution, number>();
  /** Mean handler run time here (ms, moving average): the basis of the retry times we give. */
  private runMs = 0;
  /** Queued work may be claimable: try claims (set by wakes; cleared by a claim that found nothing). */
  private waiting = false;
  /** Work is known to wait in the queue (we or another replica queued some, or our last claim took a task), so a
   *  new call that can wait queues behind it instead of taking a free slot first. */
  private backlog = false;
  /** Counts wakes, so a claim that found nothing does not clear a wake that arrived while it ran. */
  private wakes = 0;
  private draining = false;
  /** The per-tool room and the slots a claim in flight was given (counted as taken until it returns). */
  private claiming: Readonly<Record<string, number>> = {};
  private claimingSlots = 0;
  private claimDone: Promise<unknown> = Promise.resolve();
  /** Depth of the queue: the last store read, plus what was queued here since (an estimate between reads). */
  private depth = 0;
  private depthReadAt = 0;
  /** The one store read of the depth at a time, and how many tasks this replica had queued when it was made. */
  private depthRead: { since: number; read: Promise<number> } | undefined;
  private enqueued = 0;
  /** Creations of queued tasks in flight here: a depth read waits for them, so each is counted once. */
  private readonly creating = new Set<Promise<unknown>>();
  private timer: NodeJS.Timeout | undefined;
  /** Claims are failing (store unreachable): said once, not at every poll. */
  private claimsFailing = false;
  /** The times of claims that got no answer: each may have committed, so what it took is read back (claimedAt). */
  private readonly unanswered: number[] = [];
  private readonly unsubscribe: () => void;
  /** Wakes this replica for the earliest parked task due before the next poll. */
  private readonly wakeTimer: WakeTimer;

  /** Per-principal bounds (principal-bounds.ts). */
  readonly bounds: PrincipalBounds;

  constructor(private readonly host: QueueHost, private readonly opts: CapacityOptions) {
    this.bounds = new PrincipalBounds(host.store, opts, () => this.runMs);
    this.wakeTimer = new WakeTimer(host.store, () => this.wake(), 2 * opts.queuePollMs);
    const signals = host.bus.subscribeAll((s) => s.kind === 'queue' && this.wake(true));
    const resyncs = host.bus.onResync?.(() => this.wake());
    this.unsubscribe = () => {
      signals();
      resyncs?.();
    };
  }

  /** Checks the limits against the tools defined, and starts the fallback poll. */
  start(): void {
    for (const [name, n] of Object.entries(this.opts.toolLimits)) {
      const tool = this.host.tool(name);
      if (!tool) throw new Error(`A deployment-wide limit names tool "${name}", which this server does not define (defined: ${this.host.toolNames().join(', ') || 'none'})`);
      if (!Number.isInteger(n) || n < 1) throw new RangeError(`The deployment-wide limit of tool "${name}" must be an integer >= 1, got ${n}`);
    }
    for (const name of this.host.toolNames()) {
      const spec = this.host.tool(name)!.spec;
      if (this.deploymentLimit(name) !== undefined && spec.policy === 'never') {
        throw new RangeError(`Tool "${name}" has a deployment-wide limit but policy "never": such a tool runs only as a task (claimed from the run queue)`);
      }
    }
    this.timer = setInterval(() => {
      this.wake();
      this.wakeTimer.refresh((e) => this.host.log.debug('could not read the next parked task due', { error: String(e) }));
    }, this.opts.queuePollMs);
    this.timer.unref();
    this.wake();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.wakeTimer.stop();
    this.unsubscribe();
  }

  /** A task parked here becomes due at `t`. */
  wakeDueAt(t: number): void {
    this.wakeTimer.due(t);
  }

  private deploymentLimit(tool: string): number | undefined {
    return this.opts.toolLimits[tool] ?? this.host.tool(tool)?.spec.limit?.deployment;
  }

  private limits(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const name of this.host.toolNames()) {
      const n = this.deploymentLimit(name);
      if (n !== undefined) out[name] = n;
    }
    return out;
  }

  /** How many more handlers of `tool` may start here now (`asIfNoClaim`: were the claim in flight to take nothing). */
  private roomFor(tool: string, asIfNoClaim = false): number {
    const free = this.opts.maxRunning - this.running - this.reserved + (asIfNoClaim ? this.claimingSlots : 0);
    const perReplica = this.host.tool(tool)?.spec.limit?.perReplica;
    if (perReplica === undefined) return Math.max(0, free);
    return Math.max(0, Math.min(free, perReplica - (this.perTool.get(tool) ?? 0) - (asIfNoClaim ? 0 : this.claiming[tool] ?? 0)));
  }

  private hasRoom(tool: string): boolean {
    return this.roomFor(tool) > 0;
  }

  private take(tool: string, principal: string): Slot {
    this.reserved++;
    this.perTool.set(tool, (this.perTool.get(tool) ?? 0) + 1);
    this.bounds.took(principal);
    return { tool, principal, used: false };
  }

  /** Gives back a slot whose handler never started (no-op once used). */
  release(slot: Slot | undefined): void {
    if (!slot || slot.used) return;
    slot.used = true;
    this.reserved--;
    this.perTool.set(slot.tool, (this.perTool.get(slot.tool) ?? 1) - 1);
    this.bounds.gave(slot.principal);
    this.wake();
  }

  // ---- admission ------------------------------------------------------------------------------------------

  /** Why a call of `tool` would be refused now without storing anything (undefined: it would not be). `canWait`: the
   *  caller can follow a task (the extension, a 2025-11-25 task-augmented call) or a handle. Synchronous, so the HTTP
   *  front can answer 503 with Retry-After before the request is dispatched. */
  refusal(name: string, canWait: boolean, principal?: string): TaskProtocolError | undefined {
    const tool = this.host.tool(name);
    if (!tool) return undefined;
    if (this.host.isStopping) return shuttingDown();
    const asTask = canWait && tool.spec.policy !== 'never';
    // A claim in flight may take nothing: only what would be refused after it counts here.
    const room = this.roomFor(name, true) > 0;
    const own = () => (principal === undefined ? undefined : this.bounds.knownRefusal(principal, asTask));
    if (!asTask) return this.deploymentLimit(name) === undefined && !room ? this.busy() : own();
    // It would wait in the queue: the tool is limited, work waits already, no handler is free, or its caller runs its share here.
    const queues = this.deploymentLimit(name) !== undefined || this.backlog || !room || (principal !== undefined && !this.bounds.hasRoom(principal));
    // Only on a recent reading: a stale one must not keep refusing while other replicas drain the queue.
    const recent = Date.now() - this.depthReadAt < 1000;
    return queues && recent && this.depth >= this.opts.maxQueued ? this.queueFull(this.depth) : own();
  }

  /** A slot for a call to start here now, or 'queue' (`asTask`: the caller can follow a task or a handle). Throws
   *  when the call can neither start nor wait. */
  async admit(tool: RegisteredTool, asTask: boolean, principal: string): Promise<Slot | 'queue'> {
    if (this.deploymentLimit(tool.name) !== undefined) {
      if (asTask) return 'queue';
      throw missingTasksCapability(
        `Tool "${tool.name}" is limited across the deployment (at most ${this.deploymentLimit(tool.name)} at once), so it runs only as a task; declare the io.modelcontextprotocol/tasks extension`,
      );
    }
    for (;;) {
      // Work already waiting goes first: a new call that can wait joins the queue behind it.
      if (asTask && this.backlog) return 'queue';
      if (this.hasRoom(tool.name)) {
        if (this.bounds.hasRoom(principal)) return this.take(tool.name, principal);
        // This caller runs its share here already: it waits in the queue (whose claim skips it here meanwhile), or is refused.
        if (asTask) return 'queue';
        throw this.bounds.runningFull(principal);
      }
      // Full only because of a claim in flight (a poll, most often): its answer decides.
      if (this.roomFor(tool.name, true) === 0) break;
      await this.claimDone;
    }
    if (asTask) return 'queue';
    throw this.busy();
  }

  private busy(): TaskProtocolError {
    const ms = clamp(this.runMs || 1000, 500, 30_000);
    return serverBusy(`Every handler slot of this server is taken (${this.opts.maxRunning}) and this call cannot wait as a task; retry in ${ms} ms`, ms, 'busy');
  }

  private queueFull(depth: number): TaskProtocolError {
    const perSlot = Number.isFinite(this.opts.maxRunning) ? Math.ceil(depth / this.opts.maxRunning) : 1;
    const ms = clamp((this.runMs || 1000) * perSlot, 1000, 60_000);
    return serverBusy(`The run queue is full (${depth} tasks waiting, at most ${this.opts.maxQueued}); nothing was stored. Retry in ${ms} ms`, ms, 'queue_full');
  }

  /**
   * A place in the run queue: the depth read from the store (one read at a time) plus what this replica queued after
   * the read was made, checked against the bound and taken in the same step, so callers sharing a read each count
   * the ones before them. Throws queue_full past the bound; returns the depth before this call.
   */
  private async takeQueuePlace(): Promise<number> {
    // A creation in flight may or may not be in a read made now (counting it both ways refused calls the queue had
    // room for): let those land first, so each is in the read or in what was queued after it, never in both.
    while (this.creating.size > 0) await Promise.allSettled([...this.creating]);
    const read = (this.depthRead ??= { since: this.enqueued, read: this.host.store.queueDepth().finally(() => (this.depthRead = undefined)) });
    const stored = await read.read;
    const depth = stored + (this.enqueued - read.since);
    this.depth = depth;
    this.depthReadAt = Date.now();
    if (depth >= this.opts.maxQueued) throw this.queueFull(depth);
    this.enqueued++;
    this.depth++;
    return depth;
  }

  /** Stores the call as a queued task (after the back-pressure check) and answers its CreateTaskResult, or a handle
   *  to it for a caller that follows tasks through handles. */
  async enqueue(tool: RegisteredTool, args: JsonObject, call: CallContext, as: 'task' | 'handle'): Promise<CallOutcome> {
    // A principal's share smaller than the whole queue binds first; otherwise the queue's own bound is the one.
    const giveBack = this.opts.maxQueuedPerPrincipal < this.opts.maxQueued ? await this.bounds.takeQueued(call.principal) : () => undefined;
    let depth: number;
    try {
      depth = await this.takeQueuePlace();
    } catch (e) {
      giveBack();
      throw e;
    }
    // async: a synchronous throw (building the row) gives the place back like a failed creation.
    const creation = (async () => this.host.store.create(newTaskFor(this.host, tool, args, call, { owner: null, statusMessage: queuedMessage(depth + 1), queued: true })))();
    this.creating.add(creation);
    let created: { record: TaskRecord; created: boolean };
    try {
      created = await creation;
    } catch (e) {
      this.depth = Math.max(0, this.depth - 1);
      giveBack();
      throw creationFailure(e, this.host.log);
    } finally {
      this.creating.delete(creation);
    }
    if (created.created) {
      this.bounds.stored(call.principal, created.record.expiresAt);
      this.host.publish(QUEUE_SIGNAL_ID, 'queue');
    } else {
      this.depth = Math.max(0, this.depth - 1); // the key named a task that already existed
      giveBack();
    }
    const record = created.record;
    return as === 'task' ? { kind: 'task', task: this.host.createResult(record), record } : { kind: 'handle', record };
  }

  /** A queued task's view with its current place in the queue as the status message (read, never written: fresh on
   *  every poll without a write per position change); any other view as it is, with no await (every poll passes here). */
  withPosition<V extends TaskView>(view: V): V | Promise<V> {
    // A parked task waits for its time or an answer, not for a slot: it keeps what its handler last said.
    if (view.queuedAt === null || view.parkedAt !== null) return view;
    return this.host.store.queuePosition(view.taskId).then((position) => (position === undefined ? view : { ...view, statusMessage: queuedMessage(position) }));
  }

  /** tasks/cancel of a queued or parked task: cancelled at once, no handler involved. false: it was claimed meanwhile. */
  async cancelQueued(taskId: string, parked = false): Promise<boolean> {
    const rec = await this.host.store.cancelQueued(taskId, this.host.store.now(), parked ? 'Cancelled while parked (no handler was running)' : 'Cancelled before it started');
    if (!rec) return false;
    if (!parked) this.depth = Math.max(0, this.depth - 1);
    this.host.publish(taskId);
    return true;
  }

  // ---- the handlers running here ----------------------------------------------------------------------------

  started(exec: Execution): void {
    const slot = exec.slot;
    if (slot && !slot.used) {
      slot.used = true;
      this.reserved--;
    } else {
      this.perTool.set(exec.tool.name, (this.perTool.get(exec.tool.name) ?? 0) + 1);
      this.bounds.took(exec.principal);
    }
    this.running++;
    this.startedAt.set(exec, Date.now());
  }

  ended(exec: Execution): void {
    // A replica that was full may have sent work to the queue: its freed slot always looks there first.
    const wasFull = !this.hasRoom(exec.tool.name);
    this.running--;
    this.perTool.set(exec.tool.name, (this.perTool.get(exec.tool.name) ?? 1) - 1);
    this.bounds.gave(exec.principal);
    const since = this.startedAt.get(exec);
    if (since !== undefined) {
      const ms = Date.now() - since;
      this.runMs = this.runMs ? this.runMs * 0.8 + ms * 0.2 : ms;
    }
    if (wasFull) this.wake();
    else if (this.waiting) this.drain();
  }

  /** A task's outcome is committed: if its tool is limited deployment-wide, a slot may be free on any replica. */
  finished(tool: string): void {
    if (this.deploymentLimit(tool) !== undefined) this.host.publish(QUEUE_SIGNAL_ID, 'queue');
  }

  // ---- draining -------------------------------------------------------------------------------------------

  /** Queued work may be claimable (`known`: it certainly is): claim while this replica has room. */
  wake(known = false): void {
    if (known) this.backlog = true;
    this.waiting = true;
    this.wakes++;
    this.drain();
  }

  private drain(): void {
    if (this.draining || this.host.isStopping) return;
    this.draining = true;
    void this.drainLoop().then(
      () => {
        this.draining = false;
        if (this.claimsFailing) {
          this.claimsFailing = false;
          this.host.log.info('queued work can be claimed again');
        }
        // A wake that came while the loop was finishing.
        if (this.waiting && this.host.toolNames().some((t) => this.hasRoom(t))) this.drain();
      },
      (e) => {
        this.draining = false;
        if (!this.claimsFailing) this.host.log.warn('could not claim queued work; retrying at every poll until the store answers', { error: String(e) });
        this.claimsFailing = true;
      },
    );
  }

  /** Runs what unanswered claims took (those tasks never started: a claim's tasks start only once it answers). */
  private async runUnansweredClaims(): Promise<void> {
    while (this.unanswered.length > 0 && !this.host.isStopping) {
      for (const rec of await this.host.store.claimedAt(this.host.replicaId, this.unanswered[0]!)) {
        const tool = this.host.tool(rec.tool);
        if (!tool || this.host.runsHere(rec.taskId)) continue;
        this.host.log.warn('a claim whose answer was lost took this task; it starts now', { taskId: rec.taskId, tool: rec.tool });
        this.startClaimed(rec, tool);
      }
      this.unanswered.shift();
    }
  }

  private async drainLoop(): Promise<void> {
    await this.runUnansweredClaims();
    while (this.waiting && !this.host.isStopping) {
      const room: Record<string, number> = {};
      for (const t of this.host.toolNames()) {
        const r = this.roomFor(t);
        if (r > 0) room[t] = r;
      }
      const max = Math.min(this.opts.maxRunning - this.running - this.reserved, this.opts.claimBatch);
      if (max <= 0 || Object.keys(room).length === 0) return; // a slot freeing here drains again
      const wakes = this.wakes;
      // The slots are held while the claim is in flight, so admission cannot hand them out meanwhile.
      this.reserved += max;
      this.claimingSlots = max;
      this.claiming = room;
      let claimed: TaskRecord[];
      const now = this.host.store.now();
      const claim = this.host.store.claimQueued({ owner: this.host.replicaId, now, room, max, limits: this.limits(), principalCap: this.bounds.claimCap(max) });
      this.claimDone = claim.catch(() => undefined);
      try {
        claimed = await claim;
      } catch (e) {
        // The commit may have happened with its answer lost (a pooler restarted): what it took would be owned here
        // and run nowhere, so it is read back once the store answers.
        if (this.unanswered.length < 10_000) this.unanswered.push(now);
        throw e;
      } finally {
        this.reserved -= max;
        this.claimingSlots = 0;
        this.claiming = {};
      }
      if (claimed.length === 0) {
        if (this.wakes === wakes) this.waiting = this.backlog = false;
        continue;
      }
      this.backlog = true;
      for (const rec of claimed) this.startClaimed(rec, this.host.tool(rec.tool)!);
    }
  }

  /** Runs a task a claim of this replica took, in a slot of its own (it left the queue: the depth estimate drops). */
  private startClaimed(rec: TaskRecord, tool: RegisteredTool): void {
    this.depth = Math.max(0, this.depth - 1);
    this.host.publish(rec.taskId);
    this.host.rerun(rec, tool, this.take(rec.tool, rec.principal));
  }
}

/** A call that reached a replica while it shuts down: refused before anything is stored, to be sent again (a balancer
 *  has taken the replica out of rotation, or soon will: its readiness already says so). */
export function shuttingDown(): TaskProtocolError {
  return serverBusy('This server is shutting down; nothing was started. Retry the call: another replica takes it', 1000, 'shutting_down');
}

export function queuedMessage(position: number): string {
  return `Queued: position ${position}, waiting for a free handler slot`;
}
