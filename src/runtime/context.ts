/** What a tool handler sees: the TaskContext, and the errors its calls throw. */
import { ErrorCode, type InputRequest, type JsonObject, type JsonRpcErrorObject } from '../protocol/index.js';
import type { OutputContent } from './output.js';

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
  /** Who may answer: 'person' (default: the client's user, through the client or the answer page), 'any' (the model
   *  too, passing on what the user said, through the outlast_task_answer tool), 'operator' (the dashboard). */
  answeredBy?: 'person' | 'any' | 'operator';
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
  /**
   * Appends output to the task (what `tasks/stream`, the status tool and `tasks/get`'s output number show while it
   * runs): a string, an MCP content block (text, image, audio, resource_link, resource), a structured event
   * `{type: "com.example/progress", data}` (vendor-prefixed type), or an array of them. Resolves once durable (calls
   * made while one write is in flight share the next). Each item gets the task's next sequence number. Throws
   * OutputError for a bad item (nothing of the call written) or one over 64 KiB. In a durable tool, output of a step
   * replayed after a crash is not emitted twice. While the call still runs inline it is kept until it is a task.
   */
  output(content: OutputContent | OutputContent[]): Promise<void>;
  /** Asks the client for input (moves the task to input_required) and waits for every key's answer.
   *  Answers are stored, so a re-run after a crash gets them back without asking again. */
  input<K extends string>(requests: Record<K, InputRequest>, options?: InputOptions): Promise<Record<K, JsonObject>>;
  /** Form elicitation: one `elicitation/create` request. */
  elicit(message: string, requestedSchema: JsonObject, options?: ElicitOptions): Promise<ElicitResult>;
  /** Turns the call into a task now, without waiting for the inline budget. No-op when already a task. */
  promote(): Promise<void>;
  /** Declares (or withdraws) that re-running this handler from the start after a crash is safe. */
  setRetrySafe(safe?: boolean): Promise<void>;
  /**
   * A durable step: `fn` runs, and its value is committed to the store before the handler goes on. When the handler
   * runs again (after a crash, a takeover, or a resume from parking), a completed step returns its stored value
   * without running, and a failed one throws its error again. Identity is `name#n` (the n-th call of `name` in the
   * run), so loops, parallel steps and a deploy that adds or removes other steps keep their pairing. The value must be
   * JSON (what is stored is what is returned, on the first run too). A step that was running when its process died
   * runs again only if `idempotent`; otherwise this throws StepInterruptedError. Cancellation is checked first.
   */
  step<T>(name: string, fn: (step: StepInfo) => Promise<T> | T, options?: StepOptions): Promise<T>;
  /** A durable timer: the wake time is recorded once (as step `name#n`), so a re-run wakes at the original time. A
   *  durable tool's handler is parked while it sleeps long. Throws at once when the task's TTL ends first. */
  sleep(name: string, ms: number): Promise<void>;
}

/** What a step's function gets. */
export interface StepInfo {
  /** The handler's signal (cancel, expiry, takeover). */
  signal: AbortSignal;
  /** The step's identity, `name#n`, the same on every run: an idempotency key for the systems the step calls. */
  key: string;
  /** 1 on the first try; more on in-process retries. (An idempotent step is recorded only when it ends, so its run
   *  after a crash counts from 1 again; use `key` to make its effect idempotent.) */
  tries: number;
}

export interface StepOptions {
  /** Safe to run again if it was running when its process died (default false: the handler gets StepInterruptedError
   *  instead, and may reconcile). An idempotent step costs one commit instead of two. */
  idempotent?: boolean;
  /** In-process retries when `fn` throws: up to `max` more tries, waiting `backoffMs` (default 1000), doubling. */
  retries?: { max: number; backoffMs?: number };
  /** Largest value this step may return, in UTF-8 bytes of its JSON. Default: the runtime's maxStepResultBytes
   *  (256 KiB); at most 1 MiB. */
  maxResultBytes?: number;
}

/** A step's function threw (after its retries), or its value could not be stored. Thrown again, the same, on every
 *  replay. Uncaught, it ends the task as the original error would: `failed` when it had a JSON-RPC `code`. */
export class StepFailedError extends Error {
  readonly code: number | undefined;
  readonly data: unknown;
  constructor(readonly step: string, readonly error: JsonRpcErrorObject & { name?: string; coded?: boolean }) {
    super(error.message);
    this.name = 'StepFailedError';
    this.code = error.coded === false ? undefined : error.code;
    this.data = error.data;
  }
}

/** A step not marked idempotent was running when its process died: it may or may not have had its effect, so it is not
 *  run again. Catch it to reconcile (look the effect up) and go on; uncaught, the task fails with this reason. */
export class StepInterruptedError extends Error {
  readonly code = ErrorCode.InternalError;
  readonly data: { reason: 'step_interrupted'; step: string; epoch: number };
  constructor(readonly step: string, epoch: number) {
    super(`Step "${step}" was running when the server running this task stopped; it is not marked idempotent, so it was not run again (check whether its effect happened)`);
    this.name = 'StepInterruptedError';
    this.data = { reason: 'step_interrupted', step, epoch };
  }
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
  constructor(readonly reason: 'cancelled' | 'expired' | 'shutdown' | 'disconnected' | 'taken-over' | 'parked') {
    super(
      reason === 'cancelled' ? 'The task was cancelled by the caller'
      : reason === 'parked' ? 'The task was parked: it waits with no process holding it, and resumes from its steps when due'
      : reason === 'expired' ? 'The task outlived its TTL and was cancelled'
      : reason === 'shutdown' ? 'The server is shutting down'
      : reason === 'taken-over' ? 'Another replica took this task over (this one missed its lease); this run must stop'
      : 'The caller disconnected before the call became a task',
    );
    this.name = 'AbortError';
  }
}
