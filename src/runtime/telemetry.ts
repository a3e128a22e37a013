/**
 * The runtime's metrics through @opentelemetry/api (a no-op until the application registers an SDK's meter
 * provider before it constructs the runtime). State transitions, task and input-wait durations and takeovers are
 * observed on the store calls that make them (a proxy over the store: no change to the code that writes), tool
 * calls by mode where the server learns the outcome, poll refusals where they are decided. Names follow
 * ../shared/ops.md §2 (`outlast.*`, MCP semantic conventions for attributes); a task id is never an attribute.
 */
import { metrics, type Attributes, type Histogram, type Meter } from '@opentelemetry/api';
import { isTerminal } from '../protocol/index.js';
import type { Outcome, PendingInput, TaskRecord, TaskStore } from '../store/types.js';
import { wrapStore, type StoreWrappers } from './store-proxy.js';

/**
 * A counter on the hot path: each add is a map increment here, and the SDK reads the totals when it collects (an
 * observable counter), instead of hashing the attributes of every add.
 */
export class TallyCounter {
  private readonly totals = new Map<string, { attrs: Attributes; n: number }>();
  constructor(meter: Meter, name: string, options: { unit: string; description: string }) {
    meter.createObservableCounter(name, options).addCallback((r) => {
      for (const t of this.totals.values()) r.observe(t.n, t.attrs);
    });
  }
  /** `key` identifies `attrs` (e.g. the values joined); attributes must be few and low-cardinality. */
  add(key: string, attrs: () => Attributes): void {
    const t = this.totals.get(key);
    if (t) t.n++;
    else this.totals.set(key, { attrs: attrs(), n: 1 });
  }
}

/** The label a tool name is counted under when the runtime does not know it (caller-given names never become series). */
export const OTHER_LABEL = 'other';

/** Advised buckets of the MCP semantic conventions, seconds. */
export const MCP_BUCKETS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300];
const LONG_BUCKETS = [0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 24 * 3600];

export class RuntimeTelemetry {
  readonly transitions: TallyCounter;
  readonly taskDuration: Histogram;
  readonly inputWait: Histogram;
  readonly takeovers: TallyCounter;
  readonly toolCalls: TallyCounter;
  readonly toolCallDuration: Histogram;
  readonly pollRefusals: TallyCounter;
  /** Task watches open here (listen streams' and waits' watchers): back to zero once their clients are gone. */
  watchesOpen = 0;
  /** Whether a tool name is one the runtime defined (set by the runtime); others are counted as `other`. */
  knownTool: (name: string) => boolean = () => false;
  /** When each task this process saw ask for input started waiting (bounded; for the wait histogram). */
  private readonly waitingSince = new Map<string, { since: number; tool: string }>();

  constructor() {
    const meter = metrics.getMeter('outlast');
    this.transitions = new TallyCounter(meter, 'outlast.task.transitions', { unit: '{transition}', description: 'Task state transitions; creation counts as the first state' });
    this.taskDuration = meter.createHistogram('outlast.task.duration', { unit: 's', description: 'Task creation to terminal state', advice: { explicitBucketBoundaries: LONG_BUCKETS } });
    this.inputWait = meter.createHistogram('outlast.task.input.wait.duration', { unit: 's', description: 'Time spent waiting for a human', advice: { explicitBucketBoundaries: LONG_BUCKETS } });
    this.takeovers = new TallyCounter(meter, 'outlast.task.takeovers', { unit: '{takeover}', description: 'Unfinished tasks taken over from lost replicas' });
    this.toolCalls = new TallyCounter(meter, 'outlast.tool.calls', { unit: '{call}', description: 'Tool calls by how they were answered: inline, task or handle' });
    this.toolCallDuration = meter.createHistogram('outlast.tool.call.duration', { unit: 's', description: 'Tool call start to its answer (inline result, task or handle)', advice: { explicitBucketBoundaries: MCP_BUCKETS } });
    this.pollRefusals = new TallyCounter(meter, 'outlast.poll.refusals', { unit: '{refusal}', description: 'tasks/get refused for polling faster than advertised (429)' });
    meter.createObservableUpDownCounter('outlast.watch.active', { unit: '{watch}', description: 'Task watches open on this replica (listen streams, waits for a result)' })
      .addCallback((r) => r.observe(this.watchesOpen));
  }

  private transition(tool: string, status: string): void {
    this.transitions.add(`${tool}\u0000${status}`, () => ({ 'gen_ai.tool.name': tool, 'outlast.task.status': status }));
  }

  /** A task reached its terminal state at `at`: the transition and its duration. */
  private finished(rec: TaskRecord, at: number): void {
    this.transition(rec.tool, rec.status);
    this.taskDuration.record(Math.max(0, at - rec.createdAt) / 1000, { 'gen_ai.tool.name': rec.tool, 'outlast.task.status': rec.status });
  }

  private waitEnded(taskId: string, now: number, outcome: 'answered' | 'timeout' | 'cancelled' | 'ended'): void {
    const w = this.waitingSince.get(taskId);
    if (!w) return;
    this.waitingSince.delete(taskId);
    this.inputWait.record(Math.max(0, now - w.since) / 1000, { 'gen_ai.tool.name': w.tool, 'outlast.input.outcome': outcome });
  }

  /** The store, observed: every call passes through unchanged; the ones that change a task's state are counted. */
  instrument(store: TaskStore): TaskStore {
    const t = this;
    const wrap: StoreWrappers = {
      create: (s) => async (task: Parameters<TaskStore['create']>[0]) => {
        const r = await s.create(task);
        if (!r.created) return r;
        const rec = r.record;
        if (!isTerminal(rec.status)) t.transition(rec.tool, rec.status);
        else {
          // Written finished in its creation (NewTask.endedBy): counted as a creation, then as the finish it also is.
          t.transition(rec.tool, 'working');
          t.finished(rec, rec.updatedAt);
        }
        return r;
      },
      requestInput: (s) => async (taskId: string, owner: string, requests: Record<string, PendingInput>, now: number, epoch?: number) => {
        const before = t.waitingSince.has(taskId);
        const rec: TaskRecord = await s.requestInput(taskId, owner, requests, now, epoch);
        if (rec.status === 'input_required' && !before) {
          t.transition(rec.tool, 'input_required');
          if (t.waitingSince.size < 10_000) t.waitingSince.set(taskId, { since: rec.inputSince ?? now, tool: rec.tool });
        }
        return rec;
      },
      answerInput: (s) => async (taskId: string, responses: Record<string, unknown>, now: number) => {
        const r = await s.answerInput(taskId, responses as never, now);
        if (r.accepted.length > 0 && r.record.status === 'working') {
          t.transition(r.record.tool, 'working');
          t.waitEnded(taskId, now, 'answered');
        }
        return r;
      },
      finish: (s) => async (taskId: string, owner: string | null, outcome: Outcome, message: string | null, now: number, epoch?: number) => {
        const rec = await s.finish(taskId, owner, outcome, message, now, epoch);
        t.finished(rec, now);
        const reason = (rec.error?.data as { reason?: unknown } | undefined)?.reason;
        t.waitEnded(taskId, now, rec.status === 'cancelled' ? 'cancelled' : reason === 'input_timeout' || /input/i.test(rec.error?.message ?? '') ? 'timeout' : 'ended');
        return rec;
      },
      takeOver: (s) => async (taskId: string, from: string | null, to: string, now: number) => {
        const rec = await s.takeOver(taskId, from, to, now);
        t.takeovers.add(rec.tool, () => ({ 'gen_ai.tool.name': rec.tool }));
        return rec;
      },
    };
    return wrapStore(store, wrap);
  }

  /** A tools/call answered: inline (`result`), as a task, or with a handle. */
  toolCall(name: string, mode: 'inline' | 'task' | 'handle', seconds: number, errorType?: string): void {
    const tool = this.knownTool(name) ? name : OTHER_LABEL;
    const attrs = { 'gen_ai.tool.name': tool, 'outlast.call.mode': mode, ...(errorType ? { 'error.type': errorType } : {}) };
    this.toolCalls.add(`${tool}\u0000${mode}\u0000${errorType ?? ''}`, () => attrs);
    this.toolCallDuration.record(seconds, attrs);
  }
}
