/** The Events wire's options, its error codes and the error its steps throw (answered as a JSON-RPC error). */
import type { TaskStore } from '../../store/types.js';
import type { SignalBus } from '../../store/local-bus.js';
import type { AnswerLinkOf, CallbackPolicy } from '../../ops/events/index.js';
import type { Logger } from '../../runtime/types.js';

/** The design sketch's codes, which ChatGPT documents (SEP-3415 renumbers them; see docs/events.md). */
export const EventErrorCode = { InvalidParams: -32602, NotFound: -32011, Forbidden: -32012, ResourceExhausted: -32013, Unsupported: -32014, CallbackEndpointError: -32015 } as const;

export interface EventsWireOptions {
  store: TaskStore;
  /** The replicas' bus: a task's output event (Task Event Sources) is followed live through it. */
  bus: SignalBus;
  /** Period of the re-read that covers a lost bus signal, ms. */
  recheckMs: number;
  policy: CallbackPolicy;
  /** Links of open questions to the answer page, put in input_required events. */
  answerLinkOf?: AnswerLinkOf;
  /** Live webhook subscriptions one principal may hold. Default 100. */
  maxSubscriptionsPerPrincipal?: number;
  /** Grant when the client suggests none, ms. Default 24 h; grants are clamped to [1 min, 7 d] (never unlimited). */
  defaultTtlMs?: number;
  /** A (principal, url) that passed the challenge skips it for this long. Default 1 h. */
  verificationCacheMs?: number;
  challengeTimeoutMs?: number;
  /** SSE heartbeat period of events/stream. Default 15 000. */
  heartbeatMs?: number;
  /** How often poll and stream re-read the log while waiting. Default 250 ms. */
  readEveryMs?: number;
  /** The operator's log: what a caller is told only in categories (a refused callback's address) is logged here. */
  log?: Pick<Logger, 'info'>;
}

export class EventsError extends Error {
  constructor(readonly code: number, message: string, readonly data?: unknown) {
    super(message);
  }
}

export type Params = Record<string, unknown>;
