/**
 * Task output for 2025-11-25 callers: that wire has no `tasks/stream`, so while `tasks/result` waits, each output
 * item goes on its stream as a log message (`notifications/message`, logger `outlast/output`, data
 * `{taskId, seq, type, data}`), the one notification every 2025 client can show without a progress token. The
 * result leaves after the last item. `_meta["outlast/outputAfter"]` on tasks/result resumes after a seq already seen.
 */
import type { McpServer, ServerContext } from '@modelcontextprotocol/server';
import type { JsonObject } from '../../protocol/index.js';
import { RELATED_TASK_META } from '../../protocol/legacy.js';
import { checkAfter, followOutput } from '../../runtime/output-follow.js';
import type { TaskRuntime } from '../../runtime/runtime.js';

export const OUTPUT_LOGGER = 'outlast/output';
export const OUTPUT_AFTER_META = 'outlast/outputAfter';
/** Longest the result waits for output still being read once the task has ended, ms. */
const DRAIN_MS = 2000;

/** What the relay needs of the 2025-11-25 wire (LegacyTasks): a notification on a request's stream. */
export interface StreamNotifier {
  notifyOnStream(mcp: McpServer, ctx: ServerContext, method: string, params: JsonObject): void;
}

/** Relays `taskId`'s output on this request's stream; `drained()` resolves once every item is out (or it gave up). */
export async function relayOutputOnStream(
  runtime: TaskRuntime,
  legacy: StreamNotifier,
  mcp: McpServer,
  ctx: ServerContext,
  taskId: string,
  principal: string,
): Promise<{ drained(): Promise<void>; stop(): void }> {
  const related = { [RELATED_TASK_META]: { taskId } };
  const log = (level: 'info' | 'warning', data: JsonObject) => legacy.notifyOnStream(mcp, ctx, 'notifications/message', { level, logger: OUTPUT_LOGGER, data, _meta: related });
  let after = 0;
  try {
    after = checkAfter((ctx.mcpReq._meta as JsonObject | undefined)?.[OUTPUT_AFTER_META], `_meta["${OUTPUT_AFTER_META}"]`);
  } catch {
    log('warning', { taskId, error: `_meta["${OUTPUT_AFTER_META}"] must be an integer >= 0; output is sent from the start` });
  }
  let finished!: () => void;
  const ended = new Promise<void>((r) => (finished = r));
  const follow = (from: number): Promise<() => void> =>
    followOutput({ store: runtime.store, bus: runtime.bus, recheckMs: runtime.watchRecheckMs }, taskId, principal, from, {
      item: (i) => log('info', { taskId, seq: i.seq, type: i.type, data: i.data as JsonObject }),
      end: () => finished(),
      error: (e) => {
        runtime.log.debug('task output stopped on a tasks/result stream', { taskId, error: String(e) });
        finished();
      },
    });
  let unfollow: () => void;
  try {
    unfollow = await follow(after);
  } catch (e) {
    // A cursor older than what is kept: say what is lost, then send what is kept.
    const earliest = (e as { data?: { earliestSeq?: unknown } }).data?.earliestSeq;
    if (typeof earliest !== 'number') throw e;
    log('warning', { taskId, reason: 'events_gone', lostAfter: after, earliestSeq: earliest });
    unfollow = await follow(earliest - 1);
  }
  return {
    drained: () => Promise.race([ended, new Promise<void>((r) => setTimeout(r, DRAIN_MS).unref?.())]),
    stop: () => unfollow(),
  };
}
