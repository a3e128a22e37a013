/**
 * Per-principal bounds on open streams (`subscriptions/listen`, `tasks/stream`, `events/stream`): each holds a
 * connection and reads the store or the bus while it is open, so one principal may hold at most `max` of them on this
 * replica. Past it the request is refused (JSON-RPC `-31503`, reason `principal_streams`, naming the limit and how many
 * are open) before anything is set up; a stream's place is freed when its answer ends (the client left, the task
 * ended, the server closed it), and a request answered at once (an error) frees it at once.
 */
import { SERVER_BUSY_CODE } from '../../protocol/index.js';
import { whenAnswered } from '../telemetry/response-end.js';
import { jsonRpcError, retryAfter } from './answers.js';
import type { Answer, Reply } from './exchange.js';
import { isRequestObject, type RpcCall } from './route.js';

export const DEFAULT_MAX_STREAMS_PER_PRINCIPAL = 16;
/** The methods whose answer is a stream held open. */
export const STREAM_METHODS: ReadonlySet<string> = new Set(['subscriptions/listen', 'tasks/stream', 'events/stream']);
/** A refused client may try again after this (or at once, once it closed one of its streams). */
const RETRY_MS = 5000;

export class StreamSlots {
  /** Open streams per principal (entries at zero are removed). */
  private readonly open = new Map<string, number>();

  constructor(readonly max: number = DEFAULT_MAX_STREAMS_PER_PRINCIPAL) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`maxStreamsPerPrincipal must be an integer >= 1, got ${max}`);
  }

  openOf(principal: string): number {
    return this.open.get(principal) ?? 0;
  }

  /** For a stream request: its place (the function that frees it) or the refusal; undefined for any other message. */
  take(call: RpcCall): (() => void) | Reply | undefined {
    const m = call.msg;
    if (!isRequestObject(m) || typeof m.method !== 'string' || !STREAM_METHODS.has(m.method)) return undefined;
    const who = call.who;
    const n = this.openOf(who);
    if (n >= this.max) {
      return jsonRpcError(
        503,
        m.id,
        SERVER_BUSY_CODE,
        `This caller already has ${n} open streams on this replica (subscriptions/listen, tasks/stream, events/stream; --max-streams-per-principal ${this.max}); close one before opening another`,
        { reason: 'principal_streams', open: n, limit: this.max, retryAfterMs: RETRY_MS },
        retryAfter(RETRY_MS),
      );
    }
    this.open.set(who, n + 1);
    let freed = false;
    return () => {
      if (freed) return;
      freed = true;
      const left = this.openOf(who) - 1;
      if (left > 0) this.open.set(who, left);
      else this.open.delete(who);
    };
  }

  /** The answer, its place held until it ends: told by the adapter where it can tell (node:http), else by its body. */
  hold(call: RpcCall, answer: Answer, free: () => void): Answer {
    if (call.request.ended) {
      call.request.ended(free);
      return answer;
    }
    const watched = whenAnswered(answer, 0, free, true);
    return watched instanceof Response && watched !== answer ? call.streaming(watched) : watched;
  }
}
