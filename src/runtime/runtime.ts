/**
 * TaskRuntime: decides inline vs task, runs handlers, keeps the state machine, recovers after crashes, sweeps
 * expired tasks. It knows the store and the signal bus, never the SDK.
 */
import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';
import {
  ErrorCode,
  TaskProtocolError,
  isTerminal,
  missingTasksCapability,
  taskExpired,
  taskNotFound,
  type CreateTaskResult,
  type DetailedTask,
  type InputRequest,
  type JsonObject,
  type JsonRpcErrorObject,
} from '../protocol/index.js';
import { LocalSignalBus, type SignalBus } from '../store/local-bus.js';
import { IdempotencyConflictError, TaskWriteRefused, type Outcome, type TaskLookup, type TaskRecord, type TaskStore, type TaskView } from '../store/types.js';
import {
  InputTimeoutError,
  TaskCancelledError,
  type ElicitOptions,
  type ElicitResult,
  type InputOptions,
  type TaskContext,
  type ToolHandler,
} from './context.js';
import { validateInputResponses } from './input.js';
import { DEFAULT_POLL_LIMIT, DEFAULT_POLL_POLICY, PollGovernor, advertisedPollInterval, type PollLimitOptions, type PollPolicy } from './poll.js';

export type PromotionPolicy = 'auto' | 'always' | 'never';

export interface ToolSpec<Args = JsonObject> {
  /** `auto` (default): inline if it finishes within the budget, a task otherwise. `always`: only as a task
   *  (a client without the extension gets -32021). `never`: always inline. */
  policy?: PromotionPolicy;
  /** Inline budget for `auto`, ms. Default: the runtime's. */
  inlineBudgetMs?: number;
  /** Re-running the handler from the start after a crash is safe. Default false. */
  retrySafe?: boolean;
  /** Runs (first run included) before a retry-safe task is failed instead of re-run. Default: the runtime's. */
  maxAttempts?: number;
  /** Retention from creation; null = unlimited. Default: the runtime's. */
  ttlMs?: number | null;
  /** The real granularity of this tool's progress, ms: the floor of the advertised poll interval. */
  pollIntervalMs?: number;
  /** Default deadline for input requests, ms. */
  inputTimeoutMs?: number;
  handler: ToolHandler<Args>;
}

export interface CallContext {
  principal: string;
  clientCapabilities: JsonObject;
  /** The request declared io.modelcontextprotocol/tasks. */
  tasksDeclared: boolean;
  idempotencyKey?: string | undefined;
  /** Aborts when the request is abandoned (before promotion only). */
  signal?: AbortSignal | undefined;
  preflight?: JsonObject | undefined;
}

export type CallOutcome = { kind: 'result'; result: JsonObject } | { kind: 'task'; task: CreateTaskResult };

export interface Logger {
  debug(msg: string, extra?: JsonObject): void;
  info(msg: string, extra?: JsonObject): void;
  warn(msg: string, extra?: JsonObject): void;
  error(msg: string, extra?: JsonObject): void;
}

export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

export interface RuntimeOptions {
  store: TaskStore;
  bus?: SignalBus;
  /** This process's id in the replicas table. Default: random. */
  replicaId?: string;
  /** Default retention from creation (ms); null = unlimited. Default 24 h. */
  defaultTtlMs?: number | null;
  /** How long an `auto` call may run inline before it becomes a task. Default 1000 ms. */
  inlineBudgetMs?: number;
  /** Handlers running at once on this replica above which new `auto` calls become tasks at once. Default 64. */
  concurrencyLimit?: number;
  /** Base poll interval advertised when a tool gives none. Default 500 ms. */
  defaultPollIntervalMs?: number;
  poll?: Partial<PollPolicy>;
  /** Refusal of over-polling; false turns it off. */
  pollLimit?: Partial<PollLimitOptions> | false;
  /** Default deadline of an input request. Default 15 min. */
  defaultInputTimeoutMs?: number;
  /** Period of the re-read that covers missed input signals. Default 1000 ms. */
  inputRecheckMs?: number;
  /** Period of the re-read behind each watch (listen stream) that covers missed change signals. Default 5000 ms. */
  watchRecheckMs?: number;
  /** Sweeper period. Default 30 s. */
  sweepIntervalMs?: number;
  /** How long an expired task's tombstone is kept (so it reads "expired", not "not found"). Default 7 days. */
  tombstoneRetentionMs?: number;
  /** Heartbeat and orphan check period. Default 5 s. */
  heartbeatMs?: number;
  /** A replica whose heartbeat is older than this is dead and its tasks are taken over. Default 30 s. Must exceed
   *  heartbeatMs by a margin (at least twice). */
  leaseMs?: number;
  /** Default for ToolSpec.maxAttempts. Default 3. */
  maxAttempts?: number;
  /** Cancel unfinished work when its TTL passes (default true). */
  cancelOnExpiry?: boolean;
  log?: Logger;
}

export interface RuntimeAlert {
  kind: 'failed-unretrieved' | 'expired-unfinished' | 'worker-lost';
  taskId: string;
  tool: string;
  message: string;
}

const DAY = 86_400_000;

/** Task ids: 128 random bits, base64url. The random bytes are drawn 4 KiB at a time (one call per 256 ids). */
let idPool = Buffer.alloc(0);
let idOffset = 0;
function newTaskId(): string {
  if (idOffset + 16 > idPool.length) {
    idPool = randomBytes(4096);
    idOffset = 0;
  }
  const id = idPool.toString('base64url', idOffset, idOffset + 16);
  idOffset += 16;
  return id;
}

function stableStringify(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v) ?? 'null';
  if (Array.isArray(v)) return `[${v.map(stableStringify).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .filter((k) => o[k] !== undefined)
    .map((k) => `${JSON.stringify(k)}:${stableStringify(o[k])}`)
    .join(',')}}`;
}

export function requestHash(tool: string, args: JsonObject): string {
  return createHash('sha256').update(tool).update('\u0000').update(stableStringify(args)).digest('base64url');
}

function isoOf(ms: number): string {
  return new Date(ms).toISOString();
}

function errorCodeOf(e: unknown): number | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === 'number' && Number.isInteger(code) ? code : undefined;
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

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
const HOST = hostIdentity();

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

interface RegisteredTool {
  name: string;
  spec: ToolSpec<JsonObject>;
}

/** One run of a handler, inline or as a task. */
class Execution implements TaskContext {
  readonly controller = new AbortController();
  taskId: string | undefined;
  record: TaskRecord | undefined;
  owner: string;
  attempt: number;
  /** Settles when the handler does. */
  done!: Promise<{ ok: true; value: unknown } | { ok: false; error: unknown }>;
  private promotion: Promise<{ record: TaskRecord; created: boolean }> | undefined;
  readonly promoteRequested = deferred<void>();
  private statusMessage: string | null = null;
  private statusChain: Promise<void> = Promise.resolve();
  private lastStatusAt = 0;
  private statusEwma = 0;
  private inputSeq = 0;
  cancelReason: TaskCancelledError | undefined;
  private retrySafeOverride: boolean | undefined;
  /** When set, the outcome is not written (expired or shutdown: someone else decides). */
  abandoned = false;

  constructor(
    readonly rt: TaskRuntime,
    readonly tool: RegisteredTool,
    readonly args: JsonObject,
    readonly call: CallContext,
    fromRecord?: TaskRecord,
  ) {
    this.owner = rt.replicaId;
    this.attempt = fromRecord?.attempts ?? 1;
    if (fromRecord) {
      this.taskId = fromRecord.taskId;
      this.record = fromRecord;
      this.promotion = Promise.resolve({ record: fromRecord, created: false });
      this.statusMessage = fromRecord.statusMessage;
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }
  get principal(): string {
    return this.call.principal;
  }
  get clientCapabilities(): JsonObject {
    return this.call.clientCapabilities;
  }
  get preflight(): JsonObject | undefined {
    return this.call.preflight;
  }

  /** Another replica owns the task now: stop, and write nothing more. */
  lostOwnership(): void {
    if (this.abandoned) return;
    this.rt.log.warn('another replica took this task over; stopping this run', { taskId: this.taskId ?? null });
    this.abandoned = true;
    this.abort(new TaskCancelledError('taken-over'));
  }

  abort(reason: TaskCancelledError): void {
    if (this.controller.signal.aborted) return;
    this.cancelReason = reason;
    this.controller.abort(reason);
  }

  start(): void {
    this.rt.executions.add(this);
    this.done = (async () => {
      try {
        return { ok: true as const, value: await this.tool.spec.handler(this.args, this) };
      } catch (error) {
        return { ok: false as const, error };
      }
    })();
    void this.done.then(() => this.rt.executions.delete(this));
  }

  /** Whether the task row has been (or is being) written. */
  get persisting(): boolean {
    return this.promotion !== undefined;
  }

  /** Persists the task (once). Resolves after the commit. */
  persist(): Promise<{ record: TaskRecord; created: boolean }> {
    if (!this.promotion) {
      const now = Date.now();
      const spec = this.tool.spec;
      const key = this.call.idempotencyKey;
      this.promotion = this.rt.store
        .create({
          taskId: newTaskId(),
          principal: this.call.principal,
          tool: this.tool.name,
          args: this.call.preflight ? { ...this.args, preflight: this.call.preflight } : this.args,
          statusMessage: this.statusMessage,
          createdAt: now,
          ttlMs: spec.ttlMs !== undefined ? spec.ttlMs : this.rt.defaultTtlMs,
          pollIntervalMs: spec.pollIntervalMs ?? this.rt.defaultPollIntervalMs,
          owner: this.owner,
          retrySafe: this.retrySafeOverride ?? spec.retrySafe ?? false,
          idempotencyKey: key ?? null,
          requestHash: key ? requestHash(this.tool.name, this.args) : null,
          clientCapabilities: this.call.clientCapabilities,
        })
        .then((r) => {
          if (r.created) {
            this.taskId = r.record.taskId;
            this.record = r.record;
            // No change signal: nobody can be watching an id that has not been handed out yet.
            this.rt.track(this);
            // A status set while the row was being committed is written now.
            if (this.statusMessage !== null && this.statusMessage !== r.record.statusMessage) void this.status(this.statusMessage).catch(() => undefined);
          }
          return r;
        });
    }
    return this.promotion;
  }

  async promote(): Promise<void> {
    if (this.taskId) return;
    if (!this.call.tasksDeclared || this.tool.spec.policy === 'never') return;
    this.promoteRequested.resolve();
    await this.persist();
  }

  /** Makes sure the call is a task (input needs one). */
  private async ensureTask(what: string): Promise<string> {
    if (this.taskId) return this.taskId;
    if (!this.call.tasksDeclared || this.tool.spec.policy === 'never') {
      throw missingTasksCapability(`${what} needs the call to become a task, and this request did not declare the io.modelcontextprotocol/tasks extension`);
    }
    this.promoteRequested.resolve();
    await this.persist();
    return this.taskId!;
  }

  status(message: string): Promise<void> {
    if (typeof message !== 'string') throw new TypeError('ctx.status(message): message must be a string');
    this.statusMessage = message;
    const now = Date.now();
    if (this.lastStatusAt) {
      const gap = now - this.lastStatusAt;
      this.statusEwma = this.statusEwma ? this.statusEwma * 0.7 + gap * 0.3 : gap;
    }
    this.lastStatusAt = now;
    if (!this.taskId) return Promise.resolve();
    const taskId = this.taskId;
    // Coalesced: only the latest message is written when writes queue up.
    this.statusChain = this.statusChain.then(async () => {
      if (this.statusMessage !== message || this.abandoned) return;
      const floor = this.tool.spec.pollIntervalMs ?? this.rt.defaultPollIntervalMs;
      const interval = this.statusEwma ? Math.max(floor, Math.round(this.statusEwma)) : undefined;
      try {
        await this.rt.store.setProgress(taskId, this.owner, message, interval);
        this.rt.publish(taskId);
      } catch (e) {
        if (!(e instanceof TaskWriteRefused)) throw e;
        if (e.reason === 'fenced') this.lostOwnership();
      }
    });
    return this.statusChain;
  }

  async setRetrySafe(safe = true): Promise<void> {
    const taskId = this.taskId;
    if (!taskId) {
      this.retrySafeOverride = safe;
      return;
    }
    await this.rt.store.setRetrySafe(taskId, this.owner, safe);
  }

  private checkCapability(request: InputRequest): void {
    const caps = this.call.clientCapabilities as Record<string, unknown>;
    const need =
      request.method === 'elicitation/create' ? 'elicitation'
      : request.method === 'sampling/createMessage' ? 'sampling'
      : request.method === 'roots/list' ? 'roots'
      : undefined;
    if (!need) throw new TypeError(`ctx.input: unsupported input request method "${String(request.method)}"`);
    const declared = caps[need] as Record<string, unknown> | undefined;
    if (!declared) {
      throw new TaskProtocolError(
        ErrorCode.MissingRequiredClientCapability,
        `The tool asked for ${request.method}, which the client did not declare (capability "${need}")`,
        { requiredCapabilities: { [need]: {} } },
      );
    }
    if (need === 'elicitation' && (request.params as { mode?: string } | undefined)?.mode === 'url' && !declared.url) {
      throw new TaskProtocolError(ErrorCode.MissingRequiredClientCapability, 'The tool asked for a URL elicitation, which the client did not declare', {
        requiredCapabilities: { elicitation: { url: {} } },
      });
    }
  }

  async input<K extends string>(requests: Record<K, InputRequest>, options: InputOptions = {}): Promise<Record<K, JsonObject>> {
    const keys = Object.keys(requests) as K[];
    if (keys.length === 0) throw new TypeError('ctx.input: pass at least one request');
    for (const k of keys) this.checkCapability(requests[k]);
    this.signal.throwIfAborted();
    const taskId = await this.ensureTask('Asking for input');
    const timeoutMs = options.timeoutMs ?? this.tool.spec.inputTimeoutMs ?? this.rt.defaultInputTimeoutMs;
    const now = Date.now();
    const pending: Record<string, { request: InputRequest; deadline: number }> = {};
    for (const k of keys) pending[k] = { request: requests[k], deadline: now + timeoutMs };
    let rec = await this.rt.store.requestInput(taskId, this.owner, pending, now);
    this.record = rec;
    this.rt.publish(taskId);
    return await new Promise<Record<K, JsonObject>>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      let settled = false;
      const finish = (err: unknown, value?: Record<K, JsonObject>) => {
        if (settled) return;
        settled = true;
        if (timer) clearTimeout(timer);
        unsubscribe();
        this.signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(value!);
      };
      const check = (r: TaskRecord) => {
        if (isTerminal(r.status)) return finish(new TaskCancelledError('cancelled'));
        if (keys.every((k) => r.inputResponses[k])) {
          const out = {} as Record<K, JsonObject>;
          for (const k of keys) out[k] = r.inputResponses[k]!.response;
          return finish(null, out);
        }
        const deadlines = keys.filter((k) => r.inputRequests[k]).map((k) => r.inputRequests[k]!.deadline);
        const first = deadlines.length ? Math.min(...deadlines) : Date.now() + timeoutMs;
        if (timer) clearTimeout(timer);
        timer = setTimeout(() => {
          const open = keys.filter((k) => !r.inputResponses[k]);
          finish(new InputTimeoutError(open, timeoutMs));
        }, Math.max(0, first - Date.now()));
        timer.unref?.();
      };
      const onAbort = () => finish(this.signal.reason ?? new TaskCancelledError('cancelled'));
      this.signal.addEventListener('abort', onAbort, { once: true });
      const reread = () =>
        this.rt.store.get(taskId).then(
          (l) => (l.state === 'found' ? check(l.record) : finish(new TaskCancelledError('expired'))),
          (e) => finish(e),
        );
      const bus = this.rt.bus.subscribe(taskId, (s) => s.kind === 'input' && void reread());
      // The row is the truth: a slow re-read covers answers whose signal never arrived (another process).
      const fallback = setInterval(() => void reread(), this.rt.inputRecheckMs);
      fallback.unref?.();
      const unsubscribe = () => {
        bus();
        clearInterval(fallback);
      };
      check(rec);
    });
  }

  async elicit(message: string, requestedSchema: JsonObject, options: ElicitOptions = {}): Promise<ElicitResult> {
    const key = options.key ?? `input-${++this.inputSeq}`;
    const r = await this.input({ [key]: { method: 'elicitation/create', params: { mode: 'form', message, requestedSchema } } }, options);
    return r[key] as unknown as ElicitResult;
  }

  /** Writes the outcome of a task run. */
  async settle(result: { ok: true; value: unknown } | { ok: false; error: unknown }): Promise<void> {
    const p = await this.persist().catch(() => undefined);
    if (!p || (!p.created && !this.record)) return;
    const taskId = this.taskId!;
    this.rt.untrack(taskId);
    if (this.abandoned) return;
    await this.statusChain.catch(() => undefined);
    const outcome = this.rt.outcomeOf(result, this.cancelReason);
    const message =
      outcome.status === 'failed' ? outcome.error.message
      : outcome.status === 'cancelled' ? this.cancelReason?.message ?? 'Cancelled'
      : null;
    // The outcome must reach the store: a transient failure (database restarting) is retried with backoff for as
    // long as this replica lives; if it dies first, the task is recovered elsewhere like any other orphan.
    for (let delay = 100; ; delay = Math.min(delay * 2, 5000)) {
      try {
        await this.rt.store.finish(taskId, this.owner, outcome, message, Date.now());
        this.rt.publish(taskId);
        return;
      } catch (e) {
        if (e instanceof TaskWriteRefused) {
          this.rt.log.debug('outcome not written', { taskId, reason: e.reason });
          return;
        }
        if (this.rt.isStopping) {
          this.rt.log.error('could not write task outcome before shutdown', { taskId, error: String(e) });
          return;
        }
        this.rt.log.warn(`could not write task outcome; retrying in ${delay} ms`, { taskId, error: String(e) });
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }
}

export class TaskRuntime extends EventEmitter {
  readonly store: TaskStore;
  readonly bus: SignalBus;
  readonly replicaId: string;
  readonly defaultTtlMs: number | null;
  readonly inlineBudgetMs: number;
  readonly concurrencyLimit: number;
  readonly defaultPollIntervalMs: number;
  readonly defaultInputTimeoutMs: number;
  /** How often a handler waiting for input re-reads its row in case an answer's signal was missed. */
  readonly inputRecheckMs: number;
  readonly watchRecheckMs: number;
  readonly log: Logger;
  readonly pollPolicy: PollPolicy;
  readonly governor: PollGovernor | undefined;
  private readonly opts: Required<Pick<RuntimeOptions, 'sweepIntervalMs' | 'tombstoneRetentionMs' | 'heartbeatMs' | 'leaseMs' | 'maxAttempts' | 'cancelOnExpiry'>>;
  private readonly tools = new Map<string, RegisteredTool>();
  /** Handlers running in this process (inline and tasks). */
  readonly executions = new Set<Execution>();
  /** Task executions by id. */
  readonly running = new Map<string, Execution>();
  private timers: NodeJS.Timeout[] = [];
  private started: Promise<void> | undefined;
  private stopping = false;
  /** When this replica last failed to reach the store (its heartbeat or its lease check). */
  private storeFailedAt = 0;
  private recovering: Promise<void> | undefined;
  /** Stops listening for cancel signals. */
  private readonly unsubscribeCancels: () => void;

  constructor(options: RuntimeOptions) {
    super();
    this.store = options.store;
    this.bus = options.bus ?? options.store.createSignalBus?.({ onError: (m) => this.log.warn(m) }) ?? new LocalSignalBus();
    this.replicaId = options.replicaId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.defaultTtlMs = options.defaultTtlMs === undefined ? DAY : options.defaultTtlMs;
    this.inlineBudgetMs = options.inlineBudgetMs ?? 1000;
    this.concurrencyLimit = options.concurrencyLimit ?? 64;
    this.defaultPollIntervalMs = options.defaultPollIntervalMs ?? 500;
    this.defaultInputTimeoutMs = options.defaultInputTimeoutMs ?? 15 * 60_000;
    this.inputRecheckMs = options.inputRecheckMs ?? 1000;
    this.watchRecheckMs = options.watchRecheckMs ?? 5000;
    this.pollPolicy = { ...DEFAULT_POLL_POLICY, ...options.poll };
    this.governor = options.pollLimit === false ? undefined : new PollGovernor({ ...DEFAULT_POLL_LIMIT, ...options.pollLimit });
    this.log = options.log ?? silentLogger;
    this.opts = {
      sweepIntervalMs: options.sweepIntervalMs ?? 30_000,
      tombstoneRetentionMs: options.tombstoneRetentionMs ?? 7 * DAY,
      heartbeatMs: options.heartbeatMs ?? 5_000,
      leaseMs: options.leaseMs ?? 30_000,
      maxAttempts: options.maxAttempts ?? 3,
      cancelOnExpiry: options.cancelOnExpiry ?? true,
    };
    // One listener for the cancels of every task running here (not one subscription per task).
    const cancels = this.bus.subscribeAll((sig) => sig.kind === 'cancel' && this.onCancelSignal(sig.taskId));
    // After a gap in the signals (the bus reconnected), look for cancels recorded meanwhile at once.
    const resyncs = this.bus.onResync?.(() => void this.checkPendingCancels().catch((e) => this.log.warn('could not check pending cancels', { error: String(e) })));
    this.unsubscribeCancels = () => {
      cancels();
      resyncs?.();
    };
    if (this.opts.leaseMs < 2 * this.opts.heartbeatMs) {
      throw new RangeError(`leaseMs (${this.opts.leaseMs}) must be at least twice heartbeatMs (${this.opts.heartbeatMs}), or live replicas look dead between heartbeats`);
    }
    if (this.defaultTtlMs !== null && (!Number.isInteger(this.defaultTtlMs) || this.defaultTtlMs <= 0)) {
      throw new RangeError(`defaultTtlMs must be a positive integer number of milliseconds or null, got ${this.defaultTtlMs}`);
    }
  }

  /** Registers a tool's behaviour. Names are those of tools/call. */
  defineTool<Args = JsonObject>(name: string, spec: ToolSpec<Args>): void {
    if (this.tools.has(name)) throw new Error(`Tool "${name}" is already defined`);
    if (spec.policy && !['auto', 'always', 'never'].includes(spec.policy)) throw new RangeError(`Tool "${name}": policy must be auto, always or never`);
    this.tools.set(name, { name, spec: spec as unknown as ToolSpec<JsonObject> });
  }

  hasTool(name: string): boolean {
    return this.tools.has(name);
  }
  toolSpec(name: string): ToolSpec<JsonObject> | undefined {
    return this.tools.get(name)?.spec;
  }

  publish(taskId: string, kind: 'changed' | 'cancel' | 'input' = 'changed'): void {
    this.bus.publish({ taskId, kind });
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  /** A task now runs here: a cancel signal for it (from any replica) reaches its handler (see onCancelSignal). */
  track(exec: Execution): void {
    this.running.set(exec.taskId!, exec);
  }

  untrack(taskId: string): void {
    this.running.delete(taskId);
  }

  /** Aborts the handlers of tasks running here whose cancel was recorded (by whichever replica). */
  private async checkPendingCancels(): Promise<void> {
    if (this.running.size === 0) return;
    for (const taskId of await this.store.pendingCancels(this.replicaId)) this.running.get(taskId)?.abort(new TaskCancelledError('cancelled'));
  }

  /** A cancel was recorded for a task, perhaps on another replica: if it runs here, re-read the row and abort. */
  private onCancelSignal(taskId: string): void {
    const exec = this.running.get(taskId);
    if (!exec) return;
    void this.store.get(taskId).then(
      (l) => {
        if (l.state === 'found' && l.record.cancelRequestedAt !== null) exec.abort(new TaskCancelledError('cancelled'));
      },
      (e) => this.log.warn('could not re-read a task after a cancel signal', { taskId, error: String(e) }),
    );
  }

  /** Opens the store, registers this replica, recovers what dead processes left, starts the timers. */
  start(): Promise<void> {
    this.started ??= (async () => {
      await this.store.init();
      await this.bus.start?.();
      const now = Date.now();
      await this.store.registerReplica({ replicaId: this.replicaId, host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
      await this.recover();
      const hb = setInterval(() => void this.tick(), this.opts.heartbeatMs);
      const sw = setInterval(() => void this.sweep().catch((e) => this.log.error('sweep failed', { error: String(e) })), this.opts.sweepIntervalMs);
      hb.unref();
      sw.unref();
      this.timers.push(hb, sw);
    })();
    return this.started;
  }

  private async tick(): Promise<void> {
    if (this.stopping) return;
    try {
      if (!(await this.store.heartbeat(this.replicaId, Date.now()))) await this.presumedDead();
      // Fallback for missed signals: a cancel recorded by another process reaches the handler within a heartbeat.
      await this.checkPendingCancels();
      await this.recover();
    } catch (e) {
      this.storeFailedAt = Date.now();
      this.log.error('heartbeat failed', { error: String(e) });
    }
  }

  /**
   * Our replica row is gone: the others saw no heartbeat for a whole lease (this process was paused, or cut off
   * from the store) and may have taken our tasks. Runs whose task now belongs to someone else stop without writing;
   * the rest carry on, and the replica registers again.
   */
  private async presumedDead(): Promise<void> {
    this.log.warn('this replica was presumed dead (no heartbeat for a whole lease); checking which tasks it still owns');
    const now = Date.now();
    await this.store.registerReplica({ replicaId: this.replicaId, host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
    for (const [taskId, exec] of [...this.running]) {
      const l = await this.store.get(taskId);
      if (l.state !== 'found' || l.record.owner !== this.replicaId || isTerminal(l.record.status)) {
        exec.lostOwnership();
        this.untrack(taskId);
      }
    }
  }

  /** Takes over unfinished tasks of dead replicas: re-run when declared safe, failed with the reason otherwise. */
  recover(): Promise<void> {
    this.recovering ??= this.doRecover().finally(() => (this.recovering = undefined));
    return this.recovering;
  }

  private async doRecover(): Promise<void> {
    const now = Date.now();
    const host = HOST;
    const { leaseMs } = this.opts;
    // Just back from an outage of the store: the others may not have been able to heartbeat either. Give them a
    // whole lease to do so before judging anyone by a stale heartbeat.
    const judgeStale = now - this.storeFailedAt > leaseMs;
    const replicas = await this.store.listReplicas();
    const live: string[] = [];
    for (const r of replicas) {
      const age = now - r.heartbeatAt;
      // A replica in this very PID namespace whose process is gone is dead at once (outage or not); elsewhere only
      // the lease tells.
      const dead = r.replicaId !== this.replicaId && ((judgeStale && age > leaseMs) || (r.host === host && !pidAlive(r.pid)));
      if (dead) {
        this.log.warn('replica presumed dead; taking over its tasks', { replicaId: r.replicaId, heartbeatAgeMs: Math.round(age) });
        await this.store.removeReplica(r.replicaId);
      } else live.push(r.replicaId);
    }
    if (!live.includes(this.replicaId)) live.push(this.replicaId);
    for (;;) {
      const orphans = await this.store.listOrphans(live, 100);
      if (orphans.length === 0) break;
      for (const o of orphans) await this.adopt(o);
      if (orphans.length < 100) break;
    }
  }

  private async adopt(orphan: TaskRecord): Promise<void> {
    let rec: TaskRecord;
    try {
      rec = await this.store.takeOver(orphan.taskId, orphan.owner, this.replicaId, Date.now());
    } catch (e) {
      if (e instanceof TaskWriteRefused) return; // someone else took it, or it finished
      throw e;
    }
    const tool = this.tools.get(rec.tool);
    const maxAttempts = tool?.spec.maxAttempts ?? this.opts.maxAttempts;
    let failure: JsonRpcErrorObject | undefined;
    if (rec.cancelRequestedAt !== null) {
      await this.finishQuietly(rec.taskId, { status: 'cancelled' }, 'Cancelled: the server running it stopped after the cancel request');
      return;
    }
    if (!tool) {
      failure = { code: ErrorCode.InternalError, message: `The server running this task stopped, and tool "${rec.tool}" is no longer registered here, so it cannot be re-run`, data: { reason: 'worker_lost', attempts: rec.attempts - 1 } };
    } else if (!rec.retrySafe) {
      failure = {
        code: ErrorCode.InternalError,
        message: `The server process running this task stopped before it finished; "${rec.tool}" is not declared safe to re-run, so it was not restarted`,
        data: { reason: 'worker_lost', attempts: rec.attempts - 1 },
      };
    } else if (rec.attempts > maxAttempts) {
      failure = {
        code: ErrorCode.InternalError,
        message: `The server running this task stopped ${rec.attempts - 1} times; giving up after ${maxAttempts} attempts`,
        data: { reason: 'attempts_exhausted', attempts: rec.attempts - 1 },
      };
    }
    if (failure) {
      this.alert({ kind: 'worker-lost', taskId: rec.taskId, tool: rec.tool, message: failure.message });
      await this.finishQuietly(rec.taskId, { status: 'failed', error: failure }, failure.message);
      return;
    }
    this.log.info('re-running task after a crash', { taskId: rec.taskId, tool: rec.tool, attempt: rec.attempts });
    const { preflight, ...args } = rec.args as JsonObject & { preflight?: JsonObject };
    const exec = new Execution(
      this,
      tool!,
      args,
      { principal: rec.principal, clientCapabilities: rec.clientCapabilities, tasksDeclared: true, preflight },
      rec,
    );
    this.track(exec);
    exec.start();
    void exec.done.then((r) => exec.settle(r));
  }

  private async finishQuietly(taskId: string, outcome: Outcome, message: string): Promise<void> {
    try {
      await this.store.finish(taskId, this.replicaId, outcome, message, Date.now());
      this.publish(taskId);
    } catch (e) {
      if (!(e instanceof TaskWriteRefused)) throw e;
    }
  }

  private alert(a: RuntimeAlert): void {
    this.log.warn(`alert: ${a.message}`, { kind: a.kind, taskId: a.taskId, tool: a.tool });
    if (this.listenerCount('alert') > 0) this.emit('alert', a);
  }

  /** Expires tasks past their TTL (tombstones) and purges old tombstones. */
  async sweep(now = Date.now()): Promise<{ expired: number; purged: number }> {
    let expired = 0;
    let purged = 0;
    for (;;) {
      const r = await this.store.sweep(now, this.opts.tombstoneRetentionMs, 1000);
      expired += r.expired.length;
      purged += r.purged;
      for (const t of r.expired) {
        const exec = this.running.get(t.taskId);
        if (exec && this.opts.cancelOnExpiry) {
          exec.abandoned = true;
          exec.abort(new TaskCancelledError('expired'));
        }
        if (!isTerminal(t.status)) {
          this.alert({ kind: 'expired-unfinished', taskId: t.taskId, tool: t.tool, message: `task ${t.taskId} (${t.tool}) reached its TTL while still ${t.status}` });
        } else if (t.status === 'failed' && !t.retrieved) {
          this.alert({ kind: 'failed-unretrieved', taskId: t.taskId, tool: t.tool, message: `task ${t.taskId} (${t.tool}) failed and expired without anyone reading the failure` });
        }
        this.publish(t.taskId);
      }
      if (r.expired.length < 1000 && r.purged < 1000) break;
    }
    return { expired, purged };
  }

  /** Stops timers; waits up to `drainMs` for running handlers; fails (or leaves for re-run) the rest. */
  async stop(drainMs = 0): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    if (!this.started) return;
    await this.started.catch(() => undefined);
    const deadline = Date.now() + drainMs;
    while (this.executions.size > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, Math.min(50, Math.max(1, deadline - Date.now()))));
    }
    for (const exec of [...this.executions]) {
      exec.abandoned = true;
      exec.abort(new TaskCancelledError('shutdown'));
      const taskId = exec.taskId;
      if (!taskId) continue;
      const l = await this.store.get(taskId).catch(() => undefined);
      if (l?.state === 'found' && l.record.retrySafe) continue; // the next start re-runs it
      await this.finishQuietly(
        taskId,
        { status: 'failed', error: { code: ErrorCode.InternalError, message: 'The server shut down before the task finished; the tool is not declared safe to re-run', data: { reason: 'shutdown' } } },
        'The server shut down before the task finished',
      ).catch(() => undefined);
    }
    await this.store.removeReplica(this.replicaId).catch(() => undefined);
    this.unsubscribeCancels();
    await this.bus.close();
    await this.store.close();
  }

  /** Maps how a handler ended to a terminal outcome. */
  outcomeOf(r: { ok: true; value: unknown } | { ok: false; error: unknown }, cancel: TaskCancelledError | undefined): Outcome {
    if (r.ok) {
      const v = asToolResult(r.value);
      return v ? { status: 'completed', result: { ...v, resultType: 'complete' } } : { status: 'failed', error: NOT_A_TOOL_RESULT.toJSON() };
    }
    const e = r.error;
    if (cancel && cancel.reason === 'cancelled') return { status: 'cancelled' };
    if (e instanceof InputTimeoutError) {
      return { status: 'failed', error: { code: ErrorCode.InternalError, message: e.message, data: { reason: 'input_timeout', keys: e.keys } } };
    }
    const code = errorCodeOf(e);
    if (code !== undefined) {
      const data = (e as { data?: unknown }).data;
      const message = (e as Error).message || 'Error';
      return { status: 'failed', error: data === undefined ? { code, message } : { code, message, data } };
    }
    return { status: 'completed', result: toolErrorResult(e) };
  }

  // ---- the operations the server glue calls -------------------------------------------------------------

  /** tools/call for an Outlast tool. */
  async call(name: string, args: JsonObject, cc: CallContext): Promise<CallOutcome> {
    const tool = this.tools.get(name);
    if (!tool) throw new TaskProtocolError(ErrorCode.InvalidParams, `Tool ${name} not found`);
    if (this.stopping) throw new TaskProtocolError(ErrorCode.InternalError, 'The server is shutting down; retry on another replica or later');
    const policy = tool.spec.policy ?? 'auto';
    if (policy === 'always' && !cc.tasksDeclared) throw missingTasksCapability();
    const asTask = cc.tasksDeclared && policy !== 'never';
    const key = asTask ? cc.idempotencyKey : undefined;
    if (key !== undefined && (typeof key !== 'string' || key.length === 0 || key.length > 255)) {
      throw new TaskProtocolError(ErrorCode.InvalidParams, '_meta["outlast/idempotencyKey"] must be a non-empty string of at most 255 characters');
    }
    const exec = new Execution(this, tool, args, { ...cc, idempotencyKey: key });

    if (asTask && (policy === 'always' || key !== undefined || this.executions.size >= this.concurrencyLimit)) {
      const p = await this.persistOrThrow(exec);
      if (!p.created) return { kind: 'task', task: this.createResult(p.record) };
      exec.start();
      void exec.done.then((r) => exec.settle(r));
      return { kind: 'task', task: this.createResult(p.record) };
    }

    const onRequestAbort = () => {
      if (!exec.taskId) exec.abort(new TaskCancelledError('disconnected'));
    };
    cc.signal?.addEventListener('abort', onRequestAbort, { once: true });
    exec.start();
    try {
      if (!asTask) return this.inlineOutcome(await exec.done);
      const budget = tool.spec.inlineBudgetMs ?? this.inlineBudgetMs;
      let timer: NodeJS.Timeout | undefined;
      const winner = await Promise.race([
        exec.done.then((r) => ({ which: 'done' as const, r })),
        new Promise<{ which: 'budget' }>((res) => (timer = setTimeout(() => res({ which: 'budget' }), budget))),
        exec.promoteRequested.promise.then(() => ({ which: 'promote' as const })),
      ]);
      clearTimeout(timer);
      // Inline only if nothing started persisting the call; otherwise the task row must get its outcome.
      if (winner.which === 'done' && !exec.persisting) return this.inlineOutcome(winner.r);
      const p = await this.persistOrThrow(exec);
      void exec.done.then((r) => exec.settle(r));
      return { kind: 'task', task: this.createResult(exec.record ?? p.record) };
    } finally {
      cc.signal?.removeEventListener('abort', onRequestAbort);
    }
  }

  private async persistOrThrow(exec: Execution) {
    try {
      return await exec.persist();
    } catch (e) {
      exec.abandoned = true;
      exec.abort(new TaskCancelledError('shutdown'));
      if (e instanceof IdempotencyConflictError) throw new TaskProtocolError(ErrorCode.InvalidParams, e.message, { existingTaskId: e.existingTaskId });
      this.log.error('could not persist task', { error: String(e) });
      throw new TaskProtocolError(ErrorCode.InternalError, 'The task could not be stored; nothing was started. Retry the call.');
    }
  }

  private inlineOutcome(r: { ok: true; value: unknown } | { ok: false; error: unknown }): CallOutcome {
    if (r.ok) {
      const v = asToolResult(r.value);
      if (!v) throw NOT_A_TOOL_RESULT;
      return { kind: 'result', result: v };
    }
    const code = errorCodeOf(r.error);
    if (code !== undefined) throw r.error;
    return { kind: 'result', result: toolErrorResult(r.error) };
  }

  /** The CreateTaskResult for a record: the fields wireTask gives, built directly (on the creation hot path). */
  createResult(rec: TaskRecord): CreateTaskResult {
    const createdAt = isoOf(rec.createdAt);
    const out: CreateTaskResult = {
      resultType: 'task',
      taskId: rec.taskId,
      status: rec.status,
      createdAt,
      lastUpdatedAt: rec.updatedAt === rec.createdAt ? createdAt : isoOf(rec.updatedAt),
      ttlMs: rec.ttlMs,
    };
    if (rec.statusMessage !== null) out.statusMessage = rec.statusMessage;
    out.pollIntervalMs = advertisedPollInterval(rec, Date.now(), this.pollPolicy);
    return out;
  }

  /** The wire view of a record (what tasks/get and notifications/tasks carry). */
  wireTask(rec: TaskView, now: number): DetailedTask {
    const base = {
      taskId: rec.taskId,
      createdAt: isoOf(rec.createdAt),
      lastUpdatedAt: isoOf(rec.updatedAt),
      ttlMs: rec.ttlMs,
      pollIntervalMs: advertisedPollInterval(rec, now, this.pollPolicy),
      ...(rec.statusMessage !== null ? { statusMessage: rec.statusMessage } : {}),
    };
    switch (rec.status) {
      case 'input_required': {
        const inputRequests: Record<string, InputRequest> = {};
        for (const [k, v] of Object.entries(rec.inputRequests)) inputRequests[k] = v.request;
        return { ...base, status: 'input_required', inputRequests };
      }
      case 'completed':
        return { ...base, status: 'completed', result: rec.result ?? { content: [], resultType: 'complete' } };
      case 'failed':
        return { ...base, status: 'failed', error: rec.error ?? { code: ErrorCode.InternalError, message: 'Failed' } };
      case 'cancelled':
        return { ...base, status: 'cancelled' };
      default:
        return { ...base, status: 'working' };
    }
  }

  /** Reads a task for `principal`; another principal's task reads exactly like an unknown id. */
  async lookup(taskId: unknown, principal: string): Promise<TaskRecord> {
    return owned(await this.store.get(checkTaskId(taskId)), principal);
  }

  /** Polls faster than advertised: returns ms to wait, or 0. */
  pollBackoff(taskId: string, principal: string): number {
    return this.governor?.check(principal, taskId, Date.now()) ?? 0;
  }

  async getTask(taskId: unknown, principal: string): Promise<DetailedTask> {
    const rec = owned(await this.store.view(checkTaskId(taskId)), principal);
    const now = Date.now();
    const t = this.wireTask(rec, now);
    // A finished task needs no more polling, and its limiter entry would only hold memory.
    this.governor?.advertised(principal, rec.taskId, isTerminal(rec.status) ? undefined : t.pollIntervalMs, now);
    if (isTerminal(rec.status) && rec.retrievedAt === null) {
      void this.store.markRetrieved(rec.taskId, now).catch((e) => this.log.warn('could not note retrieval', { error: String(e) }));
    }
    return t;
  }

  async updateTask(taskId: unknown, principal: string, inputResponses: unknown): Promise<{ accepted: string[] }> {
    const rec = await this.lookup(taskId, principal);
    const responses = validateInputResponses(inputResponses, rec.inputRequests);
    if (Object.keys(responses).length === 0) return { accepted: [] };
    const { accepted } = await this.store.answerInput(rec.taskId, responses, Date.now());
    if (accepted.length > 0) {
      this.publish(rec.taskId, 'input');
      this.publish(rec.taskId);
    }
    return { accepted };
  }

  async cancelTask(taskId: unknown, principal: string): Promise<void> {
    const rec = await this.lookup(taskId, principal);
    if (isTerminal(rec.status)) return;
    await this.store.requestCancel(rec.taskId, Date.now());
    this.publish(rec.taskId, 'cancel');
    const exec = this.running.get(rec.taskId);
    if (exec) exec.abort(new TaskCancelledError('cancelled'));
  }

  /** Calls `listener` with the full task state now and after every change, until unsubscribed. */
  async watch(taskId: unknown, principal: string, listener: (task: DetailedTask) => void): Promise<() => void> {
    const rec = owned(await this.store.view(checkTaskId(taskId)), principal);
    let lastVersion = -1;
    let reading = false;
    let again = false;
    let closed = false;
    const emit = (r: TaskView) => {
      if (r.version === lastVersion) return;
      lastVersion = r.version;
      listener(this.wireTask(r, Date.now()));
    };
    const reread = async () => {
      if (reading) {
        again = true;
        return;
      }
      reading = true;
      try {
        do {
          again = false;
          const l = await this.store.view(rec.taskId);
          if (closed) return;
          if (l.state === 'found') emit(l.record);
        } while (again);
      } finally {
        reading = false;
      }
    };
    const unsubscribe = this.bus.subscribe(rec.taskId, () => void reread().catch(() => undefined));
    // The row is the truth: a slow re-read covers change signals that never arrived.
    const fallback = setInterval(() => void reread().catch(() => undefined), this.watchRecheckMs);
    fallback.unref?.();
    emit(rec);
    return () => {
      closed = true;
      clearInterval(fallback);
      unsubscribe();
    };
  }
}

const NOT_A_TOOL_RESULT = new TaskProtocolError(ErrorCode.InternalError, 'The tool handler returned something that is not a CallToolResult object');

/** A handler's return value if it is an object (a CallToolResult), else undefined. */
function asToolResult(v: unknown): JsonObject | undefined {
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as JsonObject) : undefined;
}

function checkTaskId(taskId: unknown): string {
  if (typeof taskId !== 'string' || taskId.length === 0 || taskId.length > 200) {
    throw new TaskProtocolError(ErrorCode.InvalidParams, 'params.taskId must be a non-empty string (the id from a CreateTaskResult)');
  }
  return taskId;
}

/** The record if `principal` owns it; otherwise exactly what an unknown id gets. */
function owned<R extends { principal: string }>(l: TaskLookup<R>, principal: string): R {
  if (l.state === 'found' && l.record.principal === principal) return l.record;
  if (l.state === 'expired' && l.principal === principal) throw taskExpired();
  throw taskNotFound();
}

export function toolErrorResult(e: unknown): JsonObject {
  const message = e instanceof Error ? e.message : String(e);
  return { content: [{ type: 'text', text: message }], isError: true };
}
