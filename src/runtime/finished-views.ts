/**
 * The tasks this process just finished, as their finishing write returned them. A finished task's state never changes
 * again (terminal is final: the store refuses it), so a watcher on this process that is told of the finish takes the
 * view from here instead of reading back the row that was just written (one store read less per task waited on).
 * Signals still carry no state: this is what the finish returned, not what a signal said.
 */
import { isTerminal } from '../protocol/index.js';
import type { TaskRecord, TaskView } from '../store/types.js';

export class FinishedViews {
  private readonly views = new Map<string, TaskView>();

  /** `capacity`: the most recent finishes kept (a watcher reads its task's within a turn or two of the finish). */
  constructor(private readonly capacity = 256) {}

  /** Keeps what the store returned from a finish, as a poll would read it (ignored unless terminal). */
  remember(r: TaskRecord): void {
    if (!isTerminal(r.status)) return;
    const view: TaskView = {
      taskId: r.taskId, principal: r.principal, status: r.status, statusMessage: r.statusMessage, createdAt: r.createdAt,
      updatedAt: r.updatedAt, ttlMs: r.ttlMs, pollIntervalMs: r.pollIntervalMs, result: r.result, error: r.error,
      inputRequests: r.inputRequests, retrievedAt: r.retrievedAt, version: r.version, queuedAt: r.queuedAt, parkedAt: r.parkedAt,
      outputSeq: r.outputSeq ?? 0,
    };
    this.views.delete(view.taskId);
    this.views.set(view.taskId, view);
    if (this.views.size > this.capacity) this.views.delete(this.views.keys().next().value!);
  }

  /** The view of a task this process finished lately, if it is still kept. */
  get(taskId: string): TaskView | undefined {
    return this.views.get(taskId);
  }
}
