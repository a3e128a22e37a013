/** What a tool handler sees: the TaskContext. */
import type { InputRequest, JsonObject } from '../protocol/index.js';

export interface ElicitResult {
  action: 'accept' | 'decline' | 'cancel';
  content?: Record<string, string | number | boolean | string[]>;
}

export interface InputOptions {
  /** How long to wait for the answer; past it the wait fails with InputTimeoutError (and, uncaught, so does the task). */
  timeoutMs?: number;
}

export interface ElicitOptions extends InputOptions {
  /** Key of this request, unique for the task's life. Default: `input-N`, N counting the handler's input calls. */
  key?: string;
}

export interface TaskContext {
  /** Fires when the caller cancels (tasks/cancel, or the HTTP request closing before promotion), the TTL
   *  passes, or the server shuts down. Check it before every externally visible action. */
  readonly signal: AbortSignal;
  /** The task id once the call is a task; undefined while it still runs inline. */
  readonly taskId: string | undefined;
  /** Caller identity the task is bound to. */
  readonly principal: string;
  /** 1 on the first run; higher when the handler is re-run after a crash. */
  readonly attempt: number;
  /** Client capabilities declared by the creating request. */
  readonly clientCapabilities: JsonObject;
  /** Data the tool's preflight step gathered before the task was created (MRTR rounds), if any. */
  readonly preflight: JsonObject | undefined;
  /** Sets the task's statusMessage (what pollers and listeners see). */
  status(message: string): Promise<void>;
  /** Asks the client for input (moves the task to input_required) and waits for every key's answer.
   *  Answers are stored, so a re-run after a crash gets them back without asking again. */
  input<K extends string>(requests: Record<K, InputRequest>, options?: InputOptions): Promise<Record<K, JsonObject>>;
  /** Form elicitation: one `elicitation/create` request. */
  elicit(message: string, requestedSchema: JsonObject, options?: ElicitOptions): Promise<ElicitResult>;
  /** Turns the call into a task now, without waiting for the inline budget. No-op when already a task. */
  promote(): Promise<void>;
  /** Declares (or withdraws) that re-running this handler from the start after a crash is safe. */
  setRetrySafe(safe?: boolean): Promise<void>;
}

/** A tool result as the handler returns it (a CallToolResult). */
export type ToolResult = JsonObject;

export type ToolHandler<Args = JsonObject> = (args: Args, ctx: TaskContext) => Promise<ToolResult> | ToolResult;

export class InputTimeoutError extends Error {
  constructor(readonly keys: string[], readonly timeoutMs: number) {
    super(`No answer to input ${keys.map((k) => `"${k}"`).join(', ')} within ${Math.round(timeoutMs / 1000)} s; the request expired`);
    this.name = 'InputTimeoutError';
  }
}

export class TaskCancelledError extends Error {
  constructor(readonly reason: 'cancelled' | 'expired' | 'shutdown' | 'disconnected' | 'taken-over') {
    super(
      reason === 'cancelled' ? 'The task was cancelled by the caller'
      : reason === 'expired' ? 'The task outlived its TTL and was cancelled'
      : reason === 'shutdown' ? 'The server is shutting down'
      : reason === 'taken-over' ? 'Another replica took this task over (this one missed its lease); this run must stop'
      : 'The caller disconnected before the call became a task',
    );
    this.name = 'AbortError';
  }
}
