/**
 * ctx.output: what a handler emits while it runs, appended to its task's output log (src/store/output.ts). Accepted
 * forms: a string (a text block), an MCP content block (`text`, `image`, `audio`, `resource_link`, `resource`), or a
 * structured event `{type, data}` whose type is vendor-prefixed (`com.example/progress`); or an array of them. Each
 * item is stored as `{type, data}`: a content block's type and the block itself, or the event's type and its data.
 *
 * Writes of one run are serial and batched: what is emitted while a write is in flight goes in the next one, and each
 * call resolves once its items are committed. While the call still runs inline (not yet a task) items are kept in
 * memory and written first thing when it becomes one; an inline call that finishes inline has no task and its output
 * goes with its result. In a durable tool each item has an identity (the step it was emitted in, or the steps called
 * before it, and its index there), so a step replayed after a crash does not emit its output twice.
 */
import { ErrorCode } from '../protocol/index.js';
import { MAX_OUTPUT_ITEM_BYTES, MAX_OUTPUT_TYPE_LENGTH, type OutputBounds, type OutputWrite } from '../store/output.js';
import { TaskWriteRefused, type TaskStore, type WriteFence } from '../store/types.js';
import { JsonValueError, jsonText, utf8Bytes } from './json-value.js';

/** What ctx.output accepts. */
export type OutputContent =
  | string
  | { type: 'text'; text: string; [k: string]: unknown }
  | { type: 'image' | 'audio'; data: string; mimeType: string; [k: string]: unknown }
  | { type: 'resource_link'; uri: string; name: string; [k: string]: unknown }
  | { type: 'resource'; resource: { uri: string; [k: string]: unknown }; [k: string]: unknown }
  | { type: string; data: unknown };

/** A bad argument to ctx.output (nothing of the call was written). `reason`: `output_invalid` or `output_too_large`. */
export class OutputError extends Error {
  readonly code = ErrorCode.InvalidParams;
  constructor(message: string, readonly reason: 'output_invalid' | 'output_too_large') {
    super(message);
    this.name = 'OutputError';
  }
}

const CONTENT_TYPES = new Set(['text', 'image', 'audio', 'resource_link', 'resource']);
/** A reverse-DNS prefix, a slash, a name: `com.example/progress`. */
const VENDOR_TYPE = /^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+\/[A-Za-z0-9][A-Za-z0-9._-]*$/;

const str = (v: unknown) => typeof v === 'string';

/** Why a content block is not one (undefined: it is). */
function blockProblem(b: Record<string, unknown>): string | undefined {
  switch (b.type) {
    case 'text':
      return str(b.text) ? undefined : 'a text block needs text (a string)';
    case 'image':
    case 'audio':
      return str(b.data) && str(b.mimeType) ? undefined : `an ${b.type} block needs data (base64) and mimeType (strings)`;
    case 'resource_link':
      return str(b.uri) && str(b.name) ? undefined : 'a resource_link block needs uri and name (strings)';
    default: {
      const r = b.resource as Record<string, unknown> | undefined;
      return r && typeof r === 'object' && str(r.uri) ? undefined : 'a resource block needs resource.uri (a string)';
    }
  }
}

/** One item as stored: its type and the JSON text of its data. */
export function outputItem(content: unknown): { type: string; data: string } {
  const where = 'ctx.output';
  let type: string;
  let data: unknown;
  if (typeof content === 'string') {
    type = 'text';
    data = { type: 'text', text: content };
  } else if (content !== null && typeof content === 'object' && !Array.isArray(content) && str((content as { type?: unknown }).type)) {
    const c = content as Record<string, unknown>;
    type = c.type as string;
    if (CONTENT_TYPES.has(type)) {
      const problem = blockProblem(c);
      if (problem) throw new OutputError(`${where}: ${problem}`, 'output_invalid');
      data = c;
    } else {
      if (type.length > MAX_OUTPUT_TYPE_LENGTH || !VENDOR_TYPE.test(type)) {
        throw new OutputError(
          `${where}: type "${type.slice(0, 80)}" is neither a content block (text, image, audio, resource_link, resource) nor vendor-prefixed (e.g. "com.example/progress")`,
          'output_invalid',
        );
      }
      if (!('data' in c) || c.data === undefined) throw new OutputError(`${where}: an event of type "${type}" needs data (any JSON value)`, 'output_invalid');
      data = c.data;
    }
  } else {
    throw new OutputError(`${where}: expected a string, an MCP content block ({type: "text", text}, image, audio, resource_link, resource) or {type: "vendor.prefix/name", data}`, 'output_invalid');
  }
  let text: string;
  try {
    text = jsonText(data, `${where} data`)!;
  } catch (e) {
    if (e instanceof JsonValueError) throw new OutputError(e.message, 'output_invalid');
    throw e;
  }
  const bytes = utf8Bytes(text);
  if (bytes > MAX_OUTPUT_ITEM_BYTES) {
    throw new OutputError(`${where}: one item is ${bytes} bytes of JSON; the limit is ${MAX_OUTPUT_ITEM_BYTES} (split it, or store it elsewhere and emit a resource_link)`, 'output_too_large');
  }
  return { type, data: text };
}

/** What the writer needs from its run. */
export interface OutputHost {
  readonly store: TaskStore;
  readonly bounds: OutputBounds;
  /** The task and the run's fence (undefined: the call is not a task yet). */
  target(): { taskId: string; fence: WriteFence } | undefined;
  /** Identity of an item emitted now in a durable tool (undefined: none, the tool is not durable). */
  keyOf(): string | undefined;
  /** Items were committed (signal streams). */
  written(taskId: string): void;
  /** The store refused a write: the run no longer holds the task. */
  refused(e: TaskWriteRefused): void;
  /** Runs one of the run's own store calls (through an outage it waits while the run may hold its task). */
  own<T>(call: () => Promise<T>): Promise<T>;
}

interface Pending {
  items: OutputWrite[];
  done: { resolve: () => void; reject: (e: unknown) => void };
}

export class OutputWriter {
  private pending: Pending[] = [];
  private chain: Promise<void> = Promise.resolve();
  private flushing = false;

  constructor(private readonly host: OutputHost) {}

  /** Validates and queues `content`; resolves once written (at once while the call is not a task yet). */
  emit(content: unknown): Promise<void> {
    const list = Array.isArray(content) ? content : [content];
    if (list.length === 0) return Promise.resolve();
    // Every item is checked before any is queued: a bad one writes nothing of the call.
    const items: OutputWrite[] = list.map((c) => ({ ...outputItem(c), key: null }));
    for (const i of items) i.key = this.host.keyOf() ?? null;
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ items, done: { resolve, reject } });
      // Kept until the call is a task (see flush); resolved on the next turn, so a handler emitting in a tight loop
      // still lets the inline budget's timer fire and the call become a task.
      if (!this.host.target()) return void setImmediate(resolve);
      this.flush();
    });
  }

  /** Whether output waits for the call's row (emitted before it was a task). */
  get queued(): boolean {
    return this.pending.length > 0;
  }

  /** Writes what is queued (called again when the call becomes a task). */
  flush(): void {
    if (this.flushing || this.pending.length === 0 || !this.host.target()) return;
    this.flushing = true;
    this.chain = this.chain.then(async () => {
      try {
        while (this.pending.length > 0) {
          const target = this.host.target()!;
          const batch = this.pending;
          this.pending = [];
          try {
            await this.host.own(() => this.host.store.output.append(target.taskId, target.fence, batch.flatMap((p) => p.items), this.host.bounds, this.host.store.now()));
            this.host.written(target.taskId);
            for (const p of batch) p.done.resolve();
          } catch (e) {
            if (e instanceof TaskWriteRefused) this.host.refused(e);
            for (const p of batch) p.done.reject(e);
          }
        }
      } finally {
        this.flushing = false;
      }
    });
  }

  /** Resolves once everything queued so far is written (or refused). */
  async drain(): Promise<void> {
    this.flush();
    await this.chain;
  }
}
