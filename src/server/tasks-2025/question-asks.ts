/**
 * One question, asked once per person: of all the streams that follow a task for its caller (the call itself, each
 * status call or tasks/result, on any replica), one puts each question to the client. The client keeps a request it
 * was sent after the stream that carried it has ended (it answers with a POST any replica takes), so a stream that
 * ends normally keeps its question; only a stream the client cut (it went away, or restarted) gives the question back,
 * and the next stream of the caller asks it again.
 *
 * Over HTTP the marks live in the store (TaskStore.markAsked), since the next stream may reach another replica; on a
 * session (stdio) they live with the session, which is the client.
 */
import { randomBytes } from 'node:crypto';
import type { McpServer, ServerContext } from '@modelcontextprotocol/server';
import type { TaskRuntime } from '../../runtime/runtime.js';

/** How often a stream that waits for a question held by another stream looks again (signals usually come first). */
const RETRY_MS = 2000;

/** Where a stream takes and gives back its questions. */
interface AskMarks {
  take(taskId: string, key: string): Promise<boolean>;
  giveBack(taskId: string, key: string): Promise<void>;
}

export class QuestionAsks {
  /** Per session (its McpServer): the questions one of its streams has put to the client. */
  private readonly sessions = new WeakMap<McpServer, Set<string>>();
  constructor(private readonly runtime: TaskRuntime) {}

  /** The asking side of one stream of `taskId`, open until `end()`. */
  open(mcp: McpServer, ctx: ServerContext, taskId: string): AskingStream {
    return new AskingStream(this.runtime, taskId, ctx.http ? this.storeMarks() : this.sessionMarks(mcp), ctx.http?.req?.signal ?? ctx.mcpReq.signal);
  }

  private storeMarks(): AskMarks {
    const runtime = this.runtime;
    const asker = `${runtime.replicaId}/${randomBytes(6).toString('base64url')}`;
    return {
      take: (taskId, key) => runtime.store.markAsked(taskId, key, asker, runtime.store.now()),
      async giveBack(taskId, key) {
        // The signal wakes the streams of this caller that wait for the question, on every replica.
        if (await runtime.store.unmarkAsked(taskId, key, asker)) runtime.bus.publish({ taskId, kind: 'changed' });
      },
    };
  }

  private sessionMarks(mcp: McpServer): AskMarks {
    let asked = this.sessions.get(mcp);
    if (!asked) this.sessions.set(mcp, (asked = new Set()));
    const marks = asked;
    const runtime = this.runtime;
    return {
      take: async (taskId, key) => !marks.has(`${taskId}\n${key}`) && !!marks.add(`${taskId}\n${key}`),
      async giveBack(taskId, key) {
        if (marks.delete(`${taskId}\n${key}`)) runtime.bus.publish({ taskId, kind: 'changed' });
      },
    };
  }
}

/**
 * One stream's questions: `offer` puts a question out through `send` if no other stream of the caller holds it (or
 * once the one that does gives it back, while this stream is open and the question still is); `end` gives back what
 * this stream holds when the client cut it.
 */
export class AskingStream {
  /** Questions this stream put to the client. */
  private readonly held = new Set<string>();
  /** Questions another stream holds: what to send if it gives them back. */
  private readonly waiting = new Map<string, () => void>();
  private readonly taking = new Set<string>();
  private ended = false;
  private unsubscribe: (() => void) | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;

  constructor(private readonly runtime: TaskRuntime, private readonly taskId: string, private readonly marks: AskMarks, private readonly cut: AbortSignal) {}

  /** Puts question `key` to the client through `send`, unless another stream of the caller holds it. */
  offer(key: string, send: () => void): void {
    if (this.ended || this.held.has(key) || this.taking.has(key)) return;
    this.taking.add(key);
    void this.marks.take(this.taskId, key).then(
      (mine) => {
        this.taking.delete(key);
        if (this.ended) {
          if (mine) void this.marks.giveBack(this.taskId, key).catch(() => undefined);
          return;
        }
        if (mine) {
          this.waiting.delete(key);
          this.held.add(key);
          return send();
        }
        this.waiting.set(key, send);
        this.followGiveBacks();
      },
      (e) => {
        this.taking.delete(key);
        this.runtime.log.warn('could not mark a question as asked; it is not sent on this stream', { taskId: this.taskId, key, error: String(e) });
      },
    );
  }

  /** The client could not be sent `key` (its stream is gone): another stream may ask it. */
  failed(key: string): void {
    if (this.held.delete(key)) void this.marks.giveBack(this.taskId, key).catch(() => undefined);
  }

  /** The stream ends. A stream the client cut gives back what it holds; one that ended normally keeps it (the client
   *  still holds the request). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.unsubscribe?.();
    if (this.timer) clearInterval(this.timer);
    this.waiting.clear();
    if (!this.cut.aborted) return;
    for (const key of this.held) void this.marks.giveBack(this.taskId, key).catch((e) => this.runtime.log.debug('could not give a question back', { taskId: this.taskId, key, error: String(e) }));
    this.held.clear();
  }

  /** While questions wait for another stream to give them back: try again on each signal of the task, and now and then. */
  private followGiveBacks(): void {
    if (this.unsubscribe) return;
    this.unsubscribe = this.runtime.bus.subscribe(this.taskId, () => this.retry());
    this.timer = setInterval(() => this.retry(), RETRY_MS);
    this.timer.unref?.();
  }

  private retry(): void {
    if (this.ended || this.waiting.size === 0) return;
    void this.runtime.store.view(this.taskId).then((l) => {
      if (this.ended) return;
      const open = l.state === 'found' && l.record.status === 'input_required' ? l.record.inputRequests : {};
      for (const [key, send] of [...this.waiting]) {
        if (!open[key]) this.waiting.delete(key);
        else this.offer(key, send);
      }
    }, () => undefined);
  }
}
