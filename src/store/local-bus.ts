/**
 * Signals between the parts of one process: "task X changed, re-read it". The row stays the truth; a signal
 * carries no state. A multi-process backend supplies its own SignalBus with the same shape.
 */
export type SignalKind = 'changed' | 'cancel' | 'input' | 'queue' | 'output';
/** The task id of a `queue` signal ("queued work or a freed deployment-wide slot: try a claim"); no task has it. */
export const QUEUE_SIGNAL_ID = '*';
export interface TaskSignal {
  taskId: string;
  kind: SignalKind;
}
export interface SignalBus {
  /** What carries signals between processes: `postgres` (LISTEN/NOTIFY), `redis` (pub/sub), `none` (nothing: other
   *  processes only re-read), or undefined (in-process only, e.g. SQLite). Reported by /readyz. */
  readonly carrier?: string;
  /** Whether the connection that receives signals is up now (a bus that crosses processes). */
  readonly connected?: boolean;
  /** Connects whatever carries signals between processes (called once by the runtime's start); a bus that crosses
   *  processes checks that a signal it sends comes back, and throws saying what to do when it does not. */
  start?(): Promise<void>;
  publish(signal: TaskSignal): void;
  /** Another process listens for at least `forMs` more (a bus that crosses processes and sends nothing while no
   *  other process listens; the runtime says so of replicas it sees registered). */
  notePeers?(forMs: number): void;
  /** Listens to every signal for one task; returns the unsubscribe function. */
  subscribe(taskId: string, listener: (signal: TaskSignal) => void): () => void;
  /** Listens to every signal of every task; returns the unsubscribe function. */
  subscribeAll(listener: (signal: TaskSignal) => void): () => void;
  /** Calls `listener` after a gap in which signals may have been lost (a bus that crosses processes reconnected);
   *  per-task subscribers are told by a signal of each kind. Returns the unsubscribe function. */
  onResync?(listener: () => void): () => void;
  close(): Promise<void>;
}

export class LocalSignalBus implements SignalBus {
  private readonly listeners = new Map<string, Set<(s: TaskSignal) => void>>();
  private readonly everything = new Set<(s: TaskSignal) => void>();

  publish(signal: TaskSignal): void {
    const set = this.listeners.get(signal.taskId);
    if (set) for (const l of [...set]) call(l, signal);
    for (const l of this.everything) call(l, signal);
  }

  subscribeAll(listener: (signal: TaskSignal) => void): () => void {
    this.everything.add(listener);
    return () => void this.everything.delete(listener);
  }

  subscribe(taskId: string, listener: (signal: TaskSignal) => void): () => void {
    let set = this.listeners.get(taskId);
    if (!set) this.listeners.set(taskId, (set = new Set()));
    set.add(listener);
    return () => {
      set!.delete(listener);
      if (set!.size === 0) this.listeners.delete(taskId);
    };
  }

  /** Ids with at least one subscriber. */
  taskIds(): string[] {
    return [...this.listeners.keys()];
  }

  get size(): number {
    return this.listeners.size;
  }

  async close(): Promise<void> {
    this.listeners.clear();
    this.everything.clear();
  }
}

function call(listener: (s: TaskSignal) => void, signal: TaskSignal): void {
  try {
    listener(signal);
  } catch {
    /* a listener's failure is its own */
  }
}
