/**
 * An HTTP upstream that speaks 2026-07-28 with the Tasks extension (`server/discover` lists it) may answer a call
 * with a task of its own (`resultType: "task"`). The gateway's calls to it go through TaskClient, the project's
 * requester of that extension, one per upstream connection: it declares the extension, runs the MRTR rounds, follows
 * the task with `tasks/get` at the upstream's `pollIntervalMs`, and answers its `inputRequests` with `tasks/update`.
 * Here its status messages become the gateway task's progress (status and output, progressRelay), its questions go to
 * the lease's relay (relay.ts: questions of the gateway's task), a cancel of the gateway's task is its `tasks/cancel`,
 * and its end (result, failure, cancel) is the call's.
 */
import { ClientCredentialsProvider } from '@modelcontextprotocol/client';
import { RawDispatcher, RpcError, TaskCancelledError, TaskClient, TaskFailedError, TaskGoneError, oauthFetch, type FetchLike, type TaskCall } from '../client/index.js';
import { PROTOCOL_VERSION, TASKS_EXTENSION, type JsonObject } from '../protocol/index.js';
import type { TaskContext } from '../runtime/context.js';
import type { Logger } from '../runtime/types.js';
import type { CallRelay, UpstreamSpec } from './spec.js';

type HttpSpec = Extract<UpstreamSpec, { kind: 'http' }>;

/** How long the `server/discover` probe of a new connection may take before the upstream counts as 2025-only. */
const PROBE_TIMEOUT_MS = 5000;

/** The fetch of requests to the upstream: the spec's headers on each, and its OAuth client credentials (a provider of
 *  its own per client, getting a token when the upstream answers 401). */
function httpAccess(spec: HttpSpec): { fetch?: FetchLike } {
  const headers = spec.headers ?? {};
  const withHeaders: FetchLike = (url, init) => {
    const h = new Headers(init?.headers);
    for (const [k, v] of Object.entries(headers)) h.set(k, v);
    return fetch(url, { ...init, headers: h });
  };
  if (!spec.oauth) return Object.keys(headers).length ? { fetch: withHeaders } : {};
  const { clientId, clientSecret, issuer, scope } = spec.oauth;
  return { fetch: oauthFetch(new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: issuer, ...(scope ? { scope } : {}) }), spec.url, withHeaders) };
}

/** Does the upstream speak 2026-07-28 and list the Tasks extension? Any failure (a 2025-only server refuses the
 *  request) means no. */
async function speaksTasksExtension(spec: HttpSpec, access: { fetch?: FetchLike }): Promise<boolean> {
  let probe: RawDispatcher | undefined;
  try {
    probe = new RawDispatcher({ url: spec.url, capabilities: { extensions: { [TASKS_EXTENSION]: {} } }, clientInfo: { name: 'outlast-gateway', version: '1' }, ...access });
    const d = await probe.request('server/discover', {}, { timeoutMs: PROBE_TIMEOUT_MS });
    const versions = Array.isArray(d.supportedVersions) ? d.supportedVersions : [];
    const extensions = ((d.capabilities as JsonObject | undefined)?.extensions ?? {}) as JsonObject;
    return versions.includes(PROTOCOL_VERSION) && extensions[TASKS_EXTENSION] !== undefined;
  } catch {
    return false;
  } finally {
    await probe?.close().catch(() => undefined);
  }
}

/** A TaskClient for the calls of one connection, when its upstream has the Tasks extension (else undefined); its
 *  questions go to whoever holds the connection's lease (`relay()`). */
export async function openTasksExtension(spec: UpstreamSpec, relay: () => CallRelay | undefined): Promise<TaskClient | undefined> {
  if (spec.kind !== 'http') return undefined;
  // One access per connection: with OAuth, the probe's token serves its calls too.
  const access = httpAccess(spec);
  if (!(await speaksTasksExtension(spec, access))) return undefined;
  const leased = () => {
    const r = relay();
    // Association is by lease, as for the requests of a 2025-11-25 session (upstream.ts).
    if (!r) throw new Error('The gateway has no call in flight on this connection to answer the upstream task\'s question');
    return r;
  };
  return new TaskClient({
    url: spec.url,
    ...access,
    clientInfo: { name: 'outlast-gateway', version: '1' },
    status: 'poll',
    // The gateway's own deadline (--call-timeout-ms) bounds the call; a round is not cut short and re-sent here.
    callTimeoutMs: 0,
    elicitation: (params, c) => leased().elicit(params, c.signal),
    sampling: (params, c) => leased().sample(params, c.signal),
  });
}

/** What becomes of a status message of the upstream's task: the gateway's progress (status and an output item). */
export type StatusMessageSink = (message: string) => void;

/** An error shaped as the SDK's (a JSON-RPC `code`, or its `REQUEST_TIMEOUT`), for call.ts's upstreamFailure. */
function asUpstreamError(code: number | string, message: string, data?: unknown): Error {
  return Object.assign(new Error(message), { code, ...(data !== undefined ? { data } : {}) });
}

/** What a call through the Tasks extension reports to its caller (call.ts). */
export interface ExtensionCallOptions {
  callTimeoutMs: number | undefined;
  onStatusMessage: StatusMessageSink;
  /** The upstream answered with a task, about to be followed (resume.ts records it); `stop` when the following ends. */
  onTask?: (taskId: string) => { stop(): Promise<void> };
  log: Logger;
}

/**
 * One call through the Tasks extension: the upstream's plain answer, or its task followed to the end. Rejects with the
 * gateway's cancel reason when `ctx.signal` aborts (after `tasks/cancel` was sent upstream), with a `REQUEST_TIMEOUT`
 * past `callTimeoutMs` (the upstream task cancelled too), or with the upstream's JSON-RPC error.
 */
export function callWithTasksExtension(tasks: TaskClient, tool: string, args: JsonObject, ctx: TaskContext, o: ExtensionCallOptions): Promise<JsonObject> {
  return followThroughExtension(tasks, (signal) => tasks.start(tool, args, { signal }), ctx, o);
}

/** An upstream task an earlier run of the call started (its replica stopped), followed again to its end as above.
 *  Rejects with TaskGoneError when the upstream no longer knows it. */
export function resumeWithTasksExtension(tasks: TaskClient, tool: string, taskId: string, ctx: TaskContext, o: ExtensionCallOptions): Promise<JsonObject> {
  return followThroughExtension(tasks, (signal) => tasks.followTask(taskId, { tool, signal }), ctx, o);
}

async function followThroughExtension(tasks: TaskClient, begin: (signal: AbortSignal) => Promise<TaskCall>, ctx: TaskContext, o: ExtensionCallOptions): Promise<JsonObject> {
  const deadline = new AbortController();
  const timer = o.callTimeoutMs === undefined ? undefined : setTimeout(() => deadline.abort(asUpstreamError('REQUEST_TIMEOUT', 'deadline')), o.callTimeoutMs);
  timer?.unref();
  const stop = AbortSignal.any([ctx.signal, deadline.signal]);
  let onStop: (() => void) | undefined;
  let recording: { stop(): Promise<void> } | undefined;
  try {
    const following = await begin(stop);
    if (following.taskId) recording = o.onTask?.(following.taskId);
    let lastMessage: string | undefined;
    const seen = (m: string | undefined) => {
      if (m && m !== lastMessage) o.onStatusMessage((lastMessage = m));
    };
    seen(following.task?.statusMessage);
    following.on('task', (t) => seen(t.statusMessage));
    following.on('note', (n) => o.log.debug('upstream task', { taskId: following.taskId ?? null, note: String((n as { error?: unknown }).error ?? n.kind) }));
    const stopped = new Promise<never>((_, reject) => {
      onStop = () => {
        // The upstream hears the cancel (its task may still end otherwise); this call stops following it.
        following.cancel().catch((e) => o.log.warn(`tasks/cancel of upstream task ${following.taskId} failed: ${(e as Error).message}`));
        reject(stop.reason);
      };
      if (stop.aborted) onStop();
      else stop.addEventListener('abort', onStop, { once: true });
    });
    stopped.catch(() => undefined);
    try {
      const { _meta: _m, resultType: _r, ...result } = await Promise.race([following.result(), stopped]);
      await recording?.stop();
      return result;
    } catch (e) {
      // TaskFailedError's message wraps the upstream's own words: "Task ID failed: WORDS (code N)".
      if (e instanceof TaskFailedError) throw asUpstreamError(e.code, e.message.replace(/^Task \S+ failed: ([\s\S]*) \(code -?\d+\)$/, '$1'), e.data);
      if (e instanceof TaskCancelledError) throw asUpstreamError(-32603, `its task ${e.taskId} was cancelled upstream`);
      if (e instanceof TaskGoneError) throw asUpstreamError(-32603, e.message);
      throw e;
    }
  } catch (e) {
    if (deadline.signal.aborted && !ctx.signal.aborted) throw deadline.signal.reason;
    if (e instanceof RpcError) throw asUpstreamError(e.code, e.message, e.data);
    throw e;
  } finally {
    void recording?.stop();
    if (timer) clearTimeout(timer);
    if (onStop) stop.removeEventListener('abort', onStop);
    // The gateway's task store keeps the call; the client (this connection's, one call at a time) keeps nothing of it.
    tasks.forgetAll();
  }
}
