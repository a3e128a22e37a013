/**
 * A call whose upstream answered with a task outlives the replica following it. Once the call is a task of the
 * gateway (a call still inline ends with its request, so it has nothing to resume), the upstream task is recorded as
 * a step of it (one commit), and the call is declared safe to run again: running it again follows that upstream
 * task, it does not call the tool again. A run after the
 * first (its replica stopped) finds the record and follows the same upstream task from whichever replica took the
 * gateway's task over. Only where another replica can reach the task: an HTTP upstream (a 2025-11-25 task in the
 * session it was made in, a Tasks-extension task by its id); a stdio upstream's process ends with its replica.
 */
import type { TaskContext } from '../runtime/context.js';
import type { Logger } from '../runtime/types.js';
import type { UpstreamSession } from './upstream.js';

/** What a replica needs to follow an upstream task it did not start. */
export type UpstreamTaskRef =
  | { wire: 'tasks-extension'; taskId: string }
  | { wire: '2025-11-25'; taskId: string; pollInterval?: number; session: UpstreamSession };

const STEP = 'upstream-task';

/** How often a call that follows an upstream task looks whether it has become a task (the runtime promotes it when
 *  its inline budget ends, or when a question needs one). */
const PROMOTION_CHECK_MS = 100;

/** Records `ref` once the call is a task (at once if it is one already). `stop`, when the following ends, waits for a
 *  record being written (it must not trail the result). */
export function recordWhenTask(ctx: TaskContext, ref: UpstreamTaskRef, log: Logger): { stop(): Promise<void> } {
  let writing: Promise<void> | undefined;
  const check = () => {
    if (writing || !ctx.taskId) return;
    clearInterval(timer);
    writing = record(ctx, ref).catch((e) => {
      if (!ctx.signal.aborted) log.warn(`could not record upstream task ${ref.taskId}: if this replica stops, the call is not followed again (${(e as Error).message})`, { taskId: ctx.taskId ?? null });
    });
  };
  const timer = setInterval(check, PROMOTION_CHECK_MS);
  timer.unref();
  check();
  return {
    async stop() {
      clearInterval(timer);
      await writing;
    },
  };
}

async function record(ctx: TaskContext, ref: UpstreamTaskRef): Promise<void> {
  await ctx.step(STEP, () => ref, { idempotent: true });
  await ctx.setRetrySafe(true);
}

/**
 * On a run after the first, the upstream task the latest earlier run recorded (undefined on a first run: no store
 * read at all). Records are read in order until one that was never written; that look costs one empty record.
 */
export async function recordedUpstreamTask(ctx: TaskContext): Promise<UpstreamTaskRef | undefined> {
  if (ctx.attempt <= 1) return undefined;
  let latest: UpstreamTaskRef | undefined;
  for (;;) {
    let unrecorded = false;
    const ref = await ctx.step<UpstreamTaskRef | null>(STEP, () => ((unrecorded = true), null), { idempotent: true });
    if (unrecorded) return latest;
    if (ref) latest = ref;
  }
}
