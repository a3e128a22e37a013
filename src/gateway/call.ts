/**
 * The handler of a mirrored tool: one upstream call, run by Outlast's runtime (inline within the budget, a task
 * beyond it). It leases a connection (pool.ts), asks for progress (the SDK sends a progressToken because `onprogress`
 * is set) and turns it into the task's status and output, relays the upstream's questions to the task's caller
 * (relay.ts), follows an upstream that answers with a task of its own (2025-11-25 Tasks here; the 2026-07-28 extension
 * in tasks-extension.ts), and forwards a cancel as the SDK's `notifications/cancelled` (or `tasks/cancel`). Failures
 * say which upstream call failed and why.
 */
import { ErrorCode, TaskProtocolError, isTerminal, type JsonObject, type TaskStatus } from '../protocol/index.js';
import type { TaskContext, ToolHandler } from '../runtime/context.js';
import type { Logger } from '../runtime/types.js';
import { coalesced } from '../runtime/coalesce.js';
import type { Lease, UpstreamPool } from './pool.js';
import { TaskGoneError } from '../client/index.js';
import { recordWhenTask, recordedUpstreamTask, type UpstreamTaskRef } from './resume.js';
import { ANY_RESULT, asGatewayResult, isInputRoundNote, type UpstreamConnection } from './upstream.js';
import { questionRelay } from './relay.js';
import { redactorOf, type Redact } from './secrets.js';
import { callWithTasksExtension, resumeWithTasksExtension } from './tasks-extension.js';

/** setTimeout's largest delay: "no deadline" for the SDK's request timeout. */
const NO_DEADLINE_MS = 2_147_483_647;
/** How long a cut-off call's connection stays open so the upstream hears the cancel before its process is ended. */
const CANCEL_GRACE_MS = 1000;

export interface UpstreamToolOptions {
  pool: UpstreamPool;
  /** The tool's name upstream. */
  tool: string;
  /** The upstream requires a task (2025-11-25 execution.taskSupport "required"): call it task-augmented. */
  taskRequired: boolean;
  callTimeoutMs: number | undefined;
  /** Safe to run again: a call whose upstream connection died under it is run once more on a fresh one. */
  retrySafe: boolean;
  log: Logger;
}

/** An upstream connection that died under a call (its process crashed, its session ended): not a cancel, not a
 *  timeout, not an error the upstream answered. */
class UpstreamLost extends TaskProtocolError {}

/** Progress notifications → the task's status (latest wins, one write at a time) and an output item each. */
function progressRelay(ctx: TaskContext, log: Logger): { on(p: JsonObject): void; settled(): Promise<unknown> } {
  let latest: JsonObject | undefined;
  const pending = new Set<Promise<unknown>>();
  const track = (p: Promise<unknown>) => {
    pending.add(p);
    void p.finally(() => pending.delete(p));
  };
  const writeStatus = coalesced(async () => {
    const p = latest!;
    const of = typeof p.total === 'number' ? ` of ${p.total}` : '';
    await ctx.status(typeof p.message === 'string' && p.message ? p.message : `progress ${String(p.progress)}${of}`);
  });
  return {
    on(p) {
      latest = p;
      track(writeStatus().catch((e) => log.debug('could not record upstream progress as status', { error: String(e) })));
      track(ctx.output({ type: 'outlast.gateway/progress', data: p }).catch((e) => log.debug('could not record upstream progress as output', { error: String(e) })));
    },
    /** The writes of the progress heard so far, done (the result must not overtake them). */
    settled: () => Promise.allSettled([...pending]),
  };
}

/** What a failed upstream call becomes: a JSON-RPC error of the call (inline), or the task's `failed` error, its words
 *  without the upstream's secrets. */
function upstreamFailure(e: unknown, conn: UpstreamConnection, what: string, callTimeoutMs: number | undefined, redact: Redact): Error {
  const raw = e as { code?: unknown; message?: string; data?: unknown };
  const err = { code: raw?.code, data: raw?.data, message: raw?.message === undefined ? undefined : redact(raw.message) };
  if (err.code === 'REQUEST_TIMEOUT') {
    return new TaskProtocolError(ErrorCode.InternalError, `${what} did not answer within ${callTimeoutMs} ms (--call-timeout-ms); the call was cancelled upstream`, {
      reason: 'upstream_timeout',
      timeoutMs: callTimeoutMs,
    });
  }
  if (conn.broken && (err.code === 'CONNECTION_CLOSED' || err.code === 'NOT_CONNECTED' || err.code === 'SEND_FAILED' || typeof err.code !== 'number')) {
    return new UpstreamLost(ErrorCode.InternalError, `${what} was lost: ${redact(conn.broken.message)}`, { reason: 'upstream_lost' });
  }
  if (typeof err.code === 'number') {
    return new TaskProtocolError(err.code, `${what} failed upstream: ${err.message ?? 'error'}`, err.data === undefined ? undefined : err.data);
  }
  return new TaskProtocolError(ErrorCode.InternalError, `${what} failed: ${err.message ?? redact(String(e))}`, { reason: 'upstream_error' });
}

/** How messages name one upstream tool's call (failures here, and `lostWork` when its replica dies). */
export function upstreamCallName(tool: string, upstream: string): string {
  return `the call of "${tool}" on upstream "${upstream}"`;
}

export function upstreamToolHandler(o: UpstreamToolOptions): ToolHandler {
  const what = upstreamCallName(o.tool, o.pool.spec.name);
  const once = callOnce(o, what);
  return async (args, ctx) => {
    // A run after its replica stopped follows the upstream task an earlier run recorded, if there is one.
    const recorded = await recordedUpstreamTask(ctx);
    try {
      return await (recorded ? resumeOnce(o, what, recorded, ctx) : once(args, ctx));
    } catch (e) {
      if (!(e instanceof UpstreamLost) || !o.retrySafe || ctx.signal.aborted) throw e;
      o.log.warn(`${e.message}; it is safe to re-run, so it runs again on a fresh connection`, { taskId: ctx.taskId ?? null });
      await ctx.status(`The upstream connection was lost; running the call again`).catch(() => undefined);
      return once(args, ctx);
    }
  };
}

/** What one leased connection does for a call: its progress and options are the call's. */
type OnConnection = (conn: UpstreamConnection, progress: ReturnType<typeof progressRelay>, options: CallOptions) => Promise<JsonObject>;
type CallOptions = { signal: AbortSignal; timeout: number; onprogress: (p: unknown) => void };

/** Runs `use` on a leased connection with the call's relays, and turns what fails into the call's error. */
async function onUpstream(o: UpstreamToolOptions, what: string, ctx: TaskContext, take: () => Promise<Lease>, use: OnConnection): Promise<JsonObject> {
  let lease: Lease;
  try {
    lease = await take();
  } catch (e) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    throw new TaskProtocolError(ErrorCode.InternalError, redactorOf(o.pool.spec)(`${what} could not start: ${(e as Error).message}`), { reason: 'upstream_unavailable' });
  }
  const conn = lease.conn;
  conn.relay = questionRelay(ctx, o.log);
  const progress = progressRelay(ctx, o.log);
  const options = { signal: ctx.signal, timeout: o.callTimeoutMs ?? NO_DEADLINE_MS, onprogress: (p: unknown) => void (isInputRoundNote(p as JsonObject) || progress.on(p as JsonObject)) };
  let cut = false;
  try {
    return await use(conn, progress, options);
  } catch (e) {
    const err = e as { code?: unknown };
    // Cut off (cancelled, timed out): the upstream was told, but what it still sends belongs to no call.
    if (ctx.signal.aborted || err?.code === 'REQUEST_TIMEOUT') cut = true;
    if (ctx.signal.aborted) throw ctx.signal.reason;
    if (e instanceof UpstreamLost) throw e;
    throw upstreamFailure(e, conn, what, o.callTimeoutMs, redactorOf(o.pool.spec));
  } finally {
    if (cut) {
      conn.retire(`${what} was cut off; this connection is not reused`);
      conn.relay = undefined;
      setTimeout(() => lease.release(), CANCEL_GRACE_MS).unref();
    } else {
      lease.release();
    }
  }
}

function callOnce(o: UpstreamToolOptions, what: string): ToolHandler {
  return (args, ctx) =>
    onUpstream(o, what, ctx, () => o.pool.lease(ctx.signal), async (conn, progress, options) => {
      if (conn.tasks) {
        const onTask = (taskId: string) => recordWhenTask(ctx, { wire: 'tasks-extension', taskId }, o.log);
        const result = await callWithTasksExtension(conn.tasks, o.tool, args, ctx, { callTimeoutMs: o.callTimeoutMs, onStatusMessage: (message) => progress.on({ message }), onTask, log: o.log });
        await progress.settled();
        return result;
      }
      const params: JsonObject = { name: o.tool, arguments: args, ...(o.taskRequired ? { task: {} } : {}) };
      const result = (await conn.client.request({ method: 'tools/call', params } as never, ANY_RESULT, options)) as JsonObject;
      const task = result.task as { taskId?: unknown; pollInterval?: unknown } | undefined;
      if (task && typeof task.taskId === 'string') {
        // In a session another replica can speak in: recorded, so that one follows it if this replica stops.
        const session = conn.session;
        const pollInterval = typeof task.pollInterval === 'number' ? task.pollInterval : undefined;
        const recording = session ? recordWhenTask(ctx, { wire: '2025-11-25', taskId: task.taskId, session, ...(pollInterval !== undefined ? { pollInterval } : {}) }, o.log) : undefined;
        try {
          return await followUpstreamTask(conn, task.taskId, pollInterval, ctx, options);
        } finally {
          await recording?.stop();
        }
      }
      await progress.settled();
      return asGatewayResult(result);
    });
}

/** The upstream no longer knows the task an earlier run recorded: the call is lost (re-run only if safe). */
function lostTask(o: UpstreamToolOptions, what: string, ref: UpstreamTaskRef, why: string): UpstreamLost {
  return new UpstreamLost(ErrorCode.InternalError, `${what} was lost: its upstream task ${ref.taskId} could not be followed again after the replica following it stopped (${redactorOf(o.pool.spec)(why)})`, {
    reason: 'upstream_lost',
    upstreamTaskId: ref.taskId,
  });
}

/** Follows again, on this replica, the upstream task an earlier run of the call recorded. */
function resumeOnce(o: UpstreamToolOptions, what: string, ref: UpstreamTaskRef, ctx: TaskContext): Promise<JsonObject> {
  o.log.info(`${what}: following its upstream task ${ref.taskId} again (the replica following it stopped)`, { taskId: ctx.taskId ?? null });
  if (ref.wire === 'tasks-extension') {
    return onUpstream(o, what, ctx, () => o.pool.lease(ctx.signal), async (conn, progress) => {
      if (!conn.tasks) throw lostTask(o, what, ref, 'the upstream no longer offers the Tasks extension');
      try {
        const result = await resumeWithTasksExtension(conn.tasks, o.tool, ref.taskId, ctx, { callTimeoutMs: o.callTimeoutMs, onStatusMessage: (message) => progress.on({ message }), log: o.log });
        await progress.settled();
        return result;
      } catch (e) {
        if (e instanceof TaskGoneError) throw lostTask(o, what, ref, e.message);
        throw e;
      }
    });
  }
  return onUpstream(o, what, ctx, () => o.pool.join(ref.session), async (conn, _progress, options) => {
    try {
      await conn.client.request({ method: 'tasks/get', params: { taskId: ref.taskId } } as never, ANY_RESULT, { signal: ctx.signal });
    } catch (e) {
      if (ctx.signal.aborted) throw e;
      throw lostTask(o, what, ref, `the upstream answered ${(e as Error).message}`);
    }
    return followUpstreamTask(conn, ref.taskId, ref.pollInterval, ctx, options);
  });
}

/**
 * An upstream that answered with a task (2025-11-25): its status becomes ours (tasks/get at its poll interval), its
 * questions arrive on the blocking tasks/result (relayed as any other), and a cancel here is its tasks/cancel.
 */
async function followUpstreamTask(
  conn: UpstreamConnection,
  taskId: string,
  pollInterval: unknown,
  ctx: TaskContext,
  options: { signal: AbortSignal; timeout: number },
): Promise<JsonObject> {
  const every = Math.min(5000, Math.max(200, typeof pollInterval === 'number' ? pollInterval : 1000));
  const onAbort = () => void conn.client.request({ method: 'tasks/cancel', params: { taskId } } as never, ANY_RESULT).catch(() => undefined);
  ctx.signal.addEventListener('abort', onAbort, { once: true });
  let polling = true;
  let lastMessage: string | undefined;
  const poll = (async () => {
    while (polling && !ctx.signal.aborted) {
      try {
        const t = (await conn.client.request({ method: 'tasks/get', params: { taskId } } as never, ANY_RESULT, { signal: ctx.signal })) as JsonObject;
        const m = typeof t.statusMessage === 'string' ? t.statusMessage : undefined;
        if (m && m !== lastMessage) {
          lastMessage = m;
          await ctx.status(m);
        }
        if (isTerminal(t.status as TaskStatus)) return;
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, every));
    }
  })();
  try {
    const payload = (await conn.client.request({ method: 'tasks/result', params: { taskId } } as never, ANY_RESULT, options)) as JsonObject;
    const { _meta: _related, ...result } = payload;
    return result;
  } finally {
    polling = false;
    ctx.signal.removeEventListener('abort', onAbort);
    void poll;
  }
}
