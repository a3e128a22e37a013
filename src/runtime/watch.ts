/** Following one task: the full state now and after every change (signals first, a slow re-read as fallback). */
import type { SignalBus } from '../store/local-bus.js';
import { coalesced } from './coalesce.js';
import type { TaskStore, TaskView } from '../store/types.js';

export interface WatchSource {
  store: TaskStore;
  bus: SignalBus;
  /** Period of the re-read that covers change signals that never arrived. */
  recheckMs: number;
  /** The view of a task this process finished lately (final: nothing changes a finished task), if it has one. */
  finishedHere?(taskId: string): TaskView | undefined;
}

/** Calls `listener` with `first` now and with each new version of the row; returns the unsubscribe function. A task
 *  id in place of `first`: nothing now, then each version after a change signal or a re-read. */
export function watchView(src: WatchSource, first: TaskView | string, listener: (view: TaskView) => void): () => void {
  const taskId = typeof first === 'string' ? first : first.taskId;
  let lastVersion = -1;
  let closed = false;
  const emit = (r: TaskView) => {
    if (r.version === lastVersion) return;
    lastVersion = r.version;
    listener(r);
  };
  const reread = coalesced(async () => {
    const finished = src.finishedHere?.(taskId);
    if (finished) return void (closed || emit(finished));
    const l = await src.store.view(taskId);
    if (closed) return;
    if (l.state === 'found') emit(l.record);
  });
  const unsubscribe = src.bus.subscribe(taskId, (s) => s.kind !== 'output' && void reread().catch(() => undefined));
  const fallback = setInterval(() => void reread().catch(() => undefined), src.recheckMs);
  fallback.unref?.();
  if (typeof first !== 'string') emit(first);
  return () => {
    closed = true;
    clearInterval(fallback);
    unsubscribe();
  };
}
