/**
 * A request that waits on a task while its caller follows no task (a handle's status call, a call held inline for a
 * 2026-07-28 client without Tasks): each change of the task's status is a `notifications/progress` on the request's
 * own stream, when the request gave a progressToken, so a host shows the work moving and keeps its timeout alive.
 */
import type { ServerContext } from '@modelcontextprotocol/server';
import type { TaskRuntime } from '../../runtime/runtime.js';

/** Numbers a token's notifications: they must increase, whoever sends the next one. */
export interface ProgressCount {
  n: number;
}

/** Sends one progress notification for `token` on the request's stream (a failed send is dropped with the stream). */
export function sendProgress(ctx: ServerContext, token: string | number, count: ProgressCount, message: string | undefined): void {
  void ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: ++count.n, ...(message ? { message } : {}) } }).catch(() => undefined);
}

/** Starts relaying; returns the stop. Nothing is sent without a token. */
export function progressOnStream(runtime: TaskRuntime, ctx: ServerContext, taskId: string, principal: string, token: string | number | undefined, count: ProgressCount = { n: 0 }): () => void {
  if (token === undefined) return () => {};
  let stop = false;
  let unwatch = () => {};
  void runtime
    .watchViews(taskId, principal, (v) => {
      if (stop) return;
      sendProgress(ctx, token, count, v.statusMessage ?? undefined);
    })
    .then((u) => (stop ? u() : (unwatch = u)), () => undefined);
  return () => {
    stop = true;
    unwatch();
  };
}
