/**
 * MCP Events delivery: any replica claims due webhook deliveries from the store (written by the database with the
 * task's change), builds one EventOccurrence per POST (the task's `tasks/get` view, thin when the body would pass
 * 256 KiB), signs it with the subscriber's secret (Standard Webhooks; one `webhook-id` across retries), posts it
 * under the SSRF rules, and retries with back-off and `Retry-After` within a bounded window. A `410` or `413` ends
 * that delivery; repeated failures deactivate the subscription until its owner refreshes it. An operator's deactivation
 * is told to the endpoint with a signed `terminated` envelope, queued in the store with it and delivered the same way.
 * A task's output (`outlast.task.output`) goes through the same attempt, from a claimed per-subscription cursor
 * (./output.ts). A `changed` or `output` signal on the bus starts a round at once; the loop's period is the safety net.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { Logger } from '../../runtime/types.js';
import type { TaskRecord, TaskStore } from '../../store/types.js';
import { TASK_FINISHED, TASK_INPUT_REQUIRED, type ClaimedControl, type ClaimedDelivery, type DeliveryOutcome, type EventName, type LoggedChange } from '../../store/events.js';
import { webhookHeaders, webhookKey } from '../../protocol/webhook.js';
import { CallbackError, callbackAgents, checkedPost, statusFailure, type CallbackPolicy } from './ssrf.js';
import type { SignalBus } from '../../store/local-bus.js';
import { sendOutput, type OutputSender } from './output.js';

export { CallbackError, addressCategory, callbackUrlProblem, isPrivateAddress, refusedAddress, type AddressCategory, type CallbackPolicy, type CallbackFailure } from './ssrf.js';

/** The body limit ChatGPT enforces on one webhook POST (bytes). */
export const MAX_EVENT_BODY_BYTES = 256 * 1024;
/** Deliveries one replica claims at a time. */
const CLAIM_BATCH = 50;
/** Deliveries one task's terminal write may claim for this replica in its own statement (the rest: a claim round). */
const COMMIT_CLAIM = 4;
export const SUBSCRIPTION_ID_HEADER = 'x-mcp-subscription-id';

/** The error a `terminated` envelope carries when an operator deactivated the subscription (-32012: Forbidden, the sketch's code). */
export const TERMINATED_BY_OPERATOR = {
  code: -32012,
  message: 'An operator of this server deactivated this subscription; subscribe again with the same identity (a refresh) to resume delivery',
  data: { reason: 'deactivated_by_operator' },
} as const;

/** The `terminated` envelope's webhook-id: one per deactivation, the same on every retry and replica. */
export function terminatedIdOf(c: Pick<ClaimedControl, 'subId' | 'seq'>): string {
  return `msg_terminated_${c.subId.slice('sub_'.length)}_${-c.seq}`;
}

export interface EventOccurrence {
  eventId: string;
  name: EventName;
  timestamp: string;
  data: Record<string, unknown>;
  cursor?: string | null;
}

/** Stable per change: the task and the store's log position (a task emits several events over its life). */
export function eventIdOf(c: LoggedChange): string {
  return `evt_${c.taskId}_${c.seq}`;
}

/** The occurrence of `change` for `name`: the tasks/get view of the task at that change; its result (or error) only when the whole body fits. */
/** The answer page's link of one open question (answer pages on), for input_required events. */
export type AnswerLinkOf = (record: TaskRecord, key: string) => string | undefined;

export async function occurrenceOf(store: TaskStore, change: LoggedChange, name: EventName, cursor?: string | null, answerLinkOf?: AnswerLinkOf, known?: TaskRecord | null): Promise<{ occurrence: EventOccurrence; body: string }> {
  const data: Record<string, unknown> = {
    taskId: change.taskId,
    tool: change.tool,
    status: change.status,
    ...(change.statusMessage !== null ? { statusMessage: change.statusMessage } : {}),
    lastUpdatedAt: new Date(change.at).toISOString(),
  };
  // Read with the claim when the store does (PostgreSQL), else here.
  const found = known !== undefined ? undefined : await store.get(change.taskId).catch(() => undefined);
  const record = known !== undefined ? known ?? undefined : found?.state === 'found' ? found.record : undefined;
  if (record && record.principal === change.principal) {
    data.createdAt = new Date(record.createdAt).toISOString();
    if (record.ttlMs !== null) data.ttl = record.ttlMs;
    if (change.status === 'input_required' && record.status === 'input_required') {
      // What is asked, never what was answered; the client answers with tasks/update (or the tool's handle).
      data.inputRequests = Object.fromEntries(
        Object.entries(record.inputRequests).map(([k, p]) => {
          const answerUrl = answerLinkOf?.(record, k);
          return [k, { method: p.request.method, message: String((p.request.params as { message?: unknown } | undefined)?.message ?? '').slice(0, 2000), ...(answerUrl ? { answerUrl } : {}) }];
        }),
      );
    }
  }
  const base: EventOccurrence = { eventId: eventIdOf(change), name, timestamp: new Date(change.at).toISOString(), data, ...(cursor !== undefined ? { cursor } : {}) };
  if (record && (change.status === 'completed' || change.status === 'failed') && record.status === change.status) {
    const full = { ...base, data: { ...data, ...(change.status === 'completed' ? { result: record.result } : { error: record.error }) } };
    const body = JSON.stringify(full);
    if (Buffer.byteLength(body) <= MAX_EVENT_BODY_BYTES) return { occurrence: full, body };
    base.data.resultOmitted = `the ${change.status === 'completed' ? 'result' : 'error'} is larger than one event may carry; fetch it with tasks/get (or the status tool)`;
  }
  return { occurrence: base, body: JSON.stringify(base) };
}

export interface ChallengeOptions {
  policy: CallbackPolicy;
  timeoutMs: number;
}

/** Endpoint verification: a signed `{type:"verification", challenge}` the endpoint must echo in a 2xx. Throws CallbackError. */
export async function verifyCallback(url: string, secret: string, subId: string, o: ChallengeOptions): Promise<void> {
  const challenge = randomBytes(24).toString('base64url');
  const body = JSON.stringify({ type: 'verification', challenge });
  const id = `msg_verification_${randomBytes(12).toString('hex')}`;
  const headers = { ...webhookHeaders(webhookKey(secret), id, body), [SUBSCRIPTION_ID_HEADER]: subId, 'user-agent': 'outlast-events' };
  const res = await checkedPost(url, headers, body, o.policy, o.timeoutMs, 4096);
  if (res.status < 200 || res.status >= 300) throw new CallbackError(statusFailure(res.status), `the endpoint answered the challenge with HTTP ${res.status}`, res.status);
  let echoed: unknown;
  try {
    echoed = (JSON.parse(res.body) as { challenge?: unknown }).challenge;
  } catch {
    echoed = undefined;
  }
  const a = Buffer.from(typeof echoed === 'string' ? echoed : '');
  const b = Buffer.from(challenge);
  if (a.length !== b.length || !timingSafeEqual(a, b)) throw new CallbackError('challenge_failed', 'the endpoint did not echo the challenge ({"challenge": "<the nonce>"})');
}

export interface EventDeliveryOptions {
  store: TaskStore;
  replicaId: string;
  log: Logger;
  policy: CallbackPolicy;
  /** Links of open questions to the answer page, put in input_required events (the person can answer from there). */
  answerLinkOf?: AnswerLinkOf;
  /** Period of the claim loop, ms. Default 250. */
  everyMs?: number;
  /** First retry after this long, then 4x longer each time (bounded by `maxAttempts`). Default 5000. */
  retryBaseMs?: number;
  /** Attempts per event before it is given up. Default 5 (about 7 minutes at the default base). */
  maxAttempts?: number;
  /** One attempt's time limit, ms. Default 10 000. */
  timeoutMs?: number;
  /** Consecutive failed attempts that deactivate a subscription until a refresh. Default 20. */
  deactivateAfter?: number;
  /** Log rows older than this are pruned (poll/stream cursors older than it lose events: a gap). Default 24 h. */
  logRetentionMs?: number;
  /** The replicas' bus: a `changed` or `output` signal (any replica committed a status change or wrote task output) wakes
   *  the loop at once; its period stays the safety net. */
  bus?: SignalBus;
}

/** What a claim round takes: after a status change, its deliveries and output cursors; after output, output cursors;
 *  with every kind, also terminated envelopes (an operator's deactivation sends no signal). */
interface Kinds {
  changed: boolean;
  output: boolean;
}
const ALL_KINDS: Kinds = { changed: true, output: true };

export class EventDelivery {
  private readonly o: Required<Omit<EventDeliveryOptions, 'answerLinkOf' | 'bus'>> & Pick<EventDeliveryOptions, 'answerLinkOf' | 'bus'>;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private woken = false;
  /** Kinds signalled since the last round began; `claimAll`: the next round claims every kind. */
  private signalled: Kinds = { changed: false, output: false };
  private claimAll = true;
  private lastAll = 0;
  /** A round found no room (CLAIM_BATCH sends in flight): the next send to end wakes the loop. */
  private full = false;
  private readonly sending = new Set<Promise<void>>();
  /** Room held by terminal writes that claim their deliveries in their own statement, until they return. */
  private reserved = 0;
  private unwatch: (() => void) | undefined;
  private unclaim: (() => void) | undefined;
  private lastPrune = 0;
  private pruning: Promise<void> | undefined;
  private readonly keys = new Map<string, Buffer>();
  /** Connections kept open to endpoints between POSTs (a burst to one endpoint reuses them). */
  private readonly agents = callbackAgents();
  private readonly outputs: OutputSender;

  constructor(options: EventDeliveryOptions) {
    this.o = { everyMs: 250, retryBaseMs: 5000, maxAttempts: 5, timeoutMs: 10_000, deactivateAfter: 20, logRetentionMs: 86_400_000, ...options };
    this.outputs = {
      store: this.o.store,
      replicaId: this.o.replicaId,
      log: this.o.log,
      claimMs: this.o.timeoutMs + 2000,
      attempt: (d, id, body, what, settle) => this.attempt(d, id, body, what, settle),
      sendGap: (d) => this.sendGap(d),
    };
  }

  private get claimMs(): number {
    return this.o.timeoutMs + 2000;
  }

  start(): void {
    this.timer = setTimeout(() => this.loop(), this.o.everyMs);
    // A task this replica finishes: its deliveries are claimed for it in the finishing statement (where the store can)
    // and sent as that statement returns, with no claim round trip in between; a claim round takes the rest.
    this.unclaim = this.o.store.events.claimOnCommit?.({
      replica: this.o.replicaId,
      claimMs: this.claimMs,
      reserve: () => {
        // Writes together hold at most half the batch: a claim round (other replicas' tasks, retries) keeps room.
        const r = this.stopped ? 0 : Math.min(COMMIT_CLAIM, this.room(), Math.max(0, CLAIM_BATCH / 2 - this.reserved));
        this.reserved += r;
        return r;
      },
      take: (claimed, reserved) => {
        this.reserved -= reserved;
        // Stopping: not sent; the claims lapse and another replica sends them.
        if (!this.stopped) this.sendClaimed(claimed);
        if (this.full) {
          this.full = false;
          this.wake('all');
        }
      },
    });
    // A status change (its deliveries committed with it) or output written, on any replica: claim at once (a burst
    // coalesces into one tick; the claim decides who sends each delivery, so replicas woken together never both do).
    this.unwatch = this.o.bus?.subscribeAll((s) => {
      if (s.kind === 'changed' || s.kind === 'output') this.wake(s.kind);
    });
  }

  private loop(): void {
    if (this.stopped) return;
    this.timer = undefined;
    this.woken = false;
    // A signal's round claims what the signal can have made due (a status change: its deliveries and output cursors
    // of a task that ended; output: output cursors); every kind (retries, terminated envelopes) at least once a period.
    const now = Date.now();
    const all = this.claimAll || now - this.lastAll >= this.o.everyMs;
    const kinds: Kinds = all ? ALL_KINDS : this.signalled;
    if (all) this.lastAll = now;
    this.claimAll = false;
    this.signalled = { changed: false, output: false };
    let full = false;
    this.running = this.tick(kinds).then((n) => void (full = n > 0 && n >= this.room())).finally(() => {
      this.running = undefined;
      // A full batch (or a signal while claiming) means more is due: claim again at once instead of waiting a period.
      if (full) this.claimAll = true;
      if (this.stopped) return;
      if (full || this.woken) this.timer = setTimeout(() => this.loop(), 0);
      else this.timer = setTimeout(() => ((this.claimAll = true), this.loop()), this.o.everyMs); // the period's round: every kind
    });
  }

  private wake(kind: 'changed' | 'output' | 'all'): void {
    if (kind === 'all') this.claimAll = true;
    else this.signalled[kind] = true;
    if (this.stopped || this.woken) return;
    this.woken = true;
    if (this.running) return; // the running claim round claims again when it ends
    if (this.timer) clearTimeout(this.timer);
    // The next turn, not a later timer: signals of one turn still share a round, and the commit waits no longer.
    this.timer = setTimeout(() => this.loop(), 0);
  }

  /** What one claim (of each kind) may take now: sends in flight count against the batch, so at most CLAIM_BATCH of
   *  each kind are in flight here, as when a round waited for its sends. */
  private room(): number {
    return Math.max(0, CLAIM_BATCH - this.sending.size - this.reserved);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.unwatch?.();
    this.unclaim?.();
    if (this.timer) clearTimeout(this.timer);
    await this.running?.catch(() => undefined);
    await Promise.all(this.sending);
    await this.pruning;
    this.agents.http.destroy();
    this.agents.https.destroy();
  }

  /** Claims what is due now and starts sending it (the next round does not wait for these sends: a signal claims at
   *  once, even while a slow endpoint holds an earlier send); returns how many were claimed. */
  async tick(kinds: Kinds = ALL_KINDS): Promise<number> {
    const room = this.room();
    if (room === 0) {
      this.full = true; // a send that ends wakes the loop
      return 0;
    }
    try {
      // The store's clock, which stamped the change's deliveries due: a wake right after a commit finds them due.
      const now = this.o.store.now();
      if (now - this.lastPrune > 60_000 && !this.pruning) {
        this.lastPrune = now;
        // Beside the claim, not before it: a large log's prune must not hold back the deliveries of this round.
        this.pruning = this.o.store.events.prune(now - this.o.logRetentionMs, now).catch((e) => this.storeTrouble(e)).finally(() => (this.pruning = undefined));
      }
      const claimMs = this.claimMs;
      // The three claims are independent statements: asked together, a round waits for one round trip, not three.
      const [claimed, control, outputs] = await Promise.all([
        kinds.changed ? this.o.store.events.claim(this.o.replicaId, now, claimMs, room) : [],
        kinds === ALL_KINDS ? this.o.store.events.claimControl(this.o.replicaId, now, claimMs, room) : [],
        // A status change can end a task whose output subscriptions then get their `task_terminal` envelope.
        kinds.output || kinds.changed ? this.o.store.outputEvents.claim(this.o.replicaId, now, claimMs, room) : [],
      ]);
      this.sendClaimed(claimed);
      for (const c of control) this.track(this.sendTerminated(c));
      for (const c of outputs) this.track(sendOutput(c, this.outputs));
      return Math.max(claimed.length, control.length, outputs.length);
    } catch (e) {
      this.storeTrouble(e);
      return 0;
    }
  }

  /** Starts sending claimed deliveries: one body per change and event name, however many subscriptions it goes to
   *  (one read of the task). */
  private sendClaimed(claimed: ClaimedDelivery[]): void {
    const bodies = new Map<string, Promise<{ occurrence: EventOccurrence; body: string }>>();
    for (const d of claimed) {
      const k = `${d.seq} ${d.name}`;
      let b = bodies.get(k);
      if (!b) bodies.set(k, (b = occurrenceOf(this.o.store, d, d.name, String(d.seq), this.o.answerLinkOf, d.task)));
      this.track(this.send(d, b));
    }
  }

  /** Keeps a send in flight counted until it ends; one that ends while the batch was full wakes the loop. */
  private track(send: Promise<unknown>): void {
    const tracked: Promise<void> = send.then(
      () => undefined,
      (e) => this.storeTrouble(e),
    ).finally(() => {
      this.sending.delete(tracked);
      if (this.full) {
        this.full = false;
        this.wake('all');
      }
    });
    this.sending.add(tracked);
  }

  private storeTrouble(e: unknown): void {
    this.o.log.warn('events: could not reach the store; retrying', { error: String(e) });
  }

  private key(secret: string): Buffer {
    let k = this.keys.get(secret);
    if (!k) {
      k = webhookKey(secret);
      if (this.keys.size > 1000) this.keys.clear();
      this.keys.set(secret, k);
    }
    return k;
  }

  /** The signed `gap` envelope after an event given up (one attempt, best effort: the event's own attempts were spent). */
  private async sendGap(d: Pick<ClaimedDelivery, 'subId' | 'seq' | 'url' | 'secret'>): Promise<void> {
    const body = JSON.stringify({ type: 'gap', cursor: String(d.seq) });
    const headers = { ...webhookHeaders(this.key(d.secret), `msg_gap_${randomBytes(12).toString('hex')}`, body), [SUBSCRIPTION_ID_HEADER]: d.subId, 'user-agent': 'outlast-events' };
    await checkedPost(d.url, headers, body, this.o.policy, this.o.timeoutMs, 0, this.agents).catch(() => undefined);
  }

  /** Delivers the `terminated` envelope of an operator's deactivation: signed, retried and settled like an event. */
  private async sendTerminated(c: ClaimedControl): Promise<void> {
    const body = JSON.stringify({ type: 'terminated', error: TERMINATED_BY_OPERATOR });
    await this.attempt(c, terminatedIdOf(c), body, { name: 'terminated' }, this.settleRow(c));
  }

  /** Settles a delivery row of the event log's deliveries. */
  private settleRow(d: Pick<ClaimedDelivery, 'subId' | 'seq'>): (o: DeliveryOutcome) => Promise<void> {
    return (o) => this.o.store.events.settle(d.subId, d.seq, this.o.replicaId, o);
  }

  private async send(d: ClaimedDelivery, built: Promise<{ occurrence: EventOccurrence; body: string }>): Promise<void> {
    const { occurrence, body } = await built;
    const final = await this.attempt(d, occurrence.eventId, body, { name: d.name }, this.settleRow(d));
    // An event given up (attempts spent, or too large) leaves a hole: say so once with a signed `gap` envelope.
    if (final === 'gap') await this.sendGap(d);
  }

  /** One signed POST of something claimed (`attempts`: this one included), settled with `settle`: 'delivered'; 'retry'
   *  (a retry is due later); 'gap' when it was given up with a hole left; 'dropped' when given up without one (410, a
   *  blocked address); 'stopped' when this replica is shutting down (nothing settled: the claim lapses). */
  private async attempt(
    d: Pick<ClaimedDelivery, 'subId' | 'url' | 'secret' | 'attempts'>,
    webhookId: string,
    body: string,
    what: { name: string },
    settle: (o: DeliveryOutcome) => Promise<unknown>,
  ): Promise<'delivered' | 'retry' | 'gap' | 'dropped' | 'stopped'> {
    const { log } = this.o;
    const headers = { ...webhookHeaders(this.key(d.secret), webhookId, body), [SUBSCRIPTION_ID_HEADER]: d.subId, 'user-agent': 'outlast-events' };
    let status: number | null = null;
    let error = '';
    let retryAfterMs: number | undefined;
    try {
      const res = await checkedPost(d.url, headers, body, this.o.policy, this.o.timeoutMs, 0, this.agents);
      status = res.status;
      retryAfterMs = res.retryAfterMs;
      if (status < 200 || status >= 300) error = statusFailure(status);
    } catch (e) {
      error = e instanceof CallbackError ? e.reason : 'connection_refused';
      if (this.stopped) return 'stopped'; // shutting down: the claim lapses and another replica retries
    }
    const now = Date.now();
    if (!error && status !== null) {
      await settle({ delivered: true, status, now });
      log.info('event delivered', { eventId: webhookId, name: what.name, subscription: d.subId, attempts: d.attempts });
      return 'delivered';
    }
    // 410: the receiver rejects this delivery; 413: it never fits. Neither is retried (the subscription stays).
    const final = status === 410 || status === 413 || error === 'blocked_address' || d.attempts >= this.o.maxAttempts;
    const backoff = this.o.retryBaseMs * 4 ** (d.attempts - 1);
    const retryAt = final ? null : now + Math.min(15 * 60_000, Math.max(retryAfterMs ?? 0, Math.round(backoff * (0.8 + Math.random() * 0.4))));
    await settle({ delivered: false, status, error, retryAt, now, deactivateAfter: this.o.deactivateAfter });
    log.warn(final ? 'event delivery given up' : 'event delivery failed; will retry', { eventId: webhookId, name: what.name, subscription: d.subId, attempts: d.attempts, error, ...(retryAt ? { retryInMs: retryAt - now } : {}) });
    if (!final) return 'retry';
    return status !== 410 && error !== 'blocked_address' ? 'gap' : 'dropped';
  }
}

export { TASK_FINISHED, TASK_INPUT_REQUIRED };
