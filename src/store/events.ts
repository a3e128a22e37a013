/**
 * The MCP Events room of the store: webhook subscriptions, the event log (one row per task status change, written
 * by a trigger in the transaction of the change: the outbox) and the delivery rows fanned out from it to each
 * matching subscription, claimed by whichever replica delivers first. Both backends implement EventStore. A task's
 * output is not in this log: its subscriptions (name `outlast.task.output`) match no change, and deliver from a cursor
 * over the task's output log (./output-events.ts).
 */
import type { TaskStatus } from '../protocol/index.js';
import type { TaskRecord } from './task-record.js';
import { TASK_OUTPUT } from './output-events.js';
import type { DeliveryOutcome } from './delivery.js';

/** Migration numbers of this room (renumber here, one line, when merging next to other rooms' migrations). */
export const EVENTS_MIGRATION = 9;
/** PostgreSQL: a change's deliveries claimed in its own statement by the replica that commits it (./postgres/commit-claim.ts). */
export const COMMIT_CLAIM_MIGRATION = 14;

/** The event names Outlast serves (the contract). */
export const TASK_FINISHED = 'outlast.task.finished';
export const TASK_INPUT_REQUIRED = 'outlast.task.input_required';
export const TASK_STATUS = 'outlast.task.status';
export const EVENT_NAMES = [TASK_FINISHED, TASK_INPUT_REQUIRED, TASK_STATUS] as const;
export type EventName = (typeof EVENT_NAMES)[number];
/** What a webhook subscription may name: a status event, or a task's output (./output-events.ts). */
export type SubscribableName = EventName | typeof TASK_OUTPUT;

/** A subscription's identity: (principal, url, name, canonical arguments); `subId` is derived from it. */
export interface SubscriptionKey {
  principal: string;
  url: string;
  name: SubscribableName;
  /** Canonical JSON of the arguments (sorted keys). */
  args: string;
}

export interface NewSubscription extends SubscriptionKey {
  subId: string;
  /** The filters the arguments carry (null: any). */
  taskId: string | null;
  tool: string | null;
  secret: string;
  /** Epoch ms, or null for no expiry. */
  refreshBefore: number | null;
  now: number;
  /** A task's output (name TASK_OUTPUT): the seq its webhook delivery starts after. A refresh keeps the cursor it has. */
  outputAfter?: number;
}

export interface SubscriptionRecord extends NewSubscription {
  createdAt: number;
  active: boolean;
  /** Consecutive failed attempts since the last success or refresh. */
  failures: number;
  verifiedAt: number | null;
  lastStatus: number | null;
  lastError: string | null;
  lastDeliveryAt: number | null;
  deactivatedBy: string | null;
  /** Deliveries not yet delivered or given up. */
  pending: number;
}

/** One status change of a task, from the event log. `seq` is the store-wide cursor position. */
export interface LoggedChange {
  seq: number;
  principal: string;
  taskId: string;
  tool: string;
  status: TaskStatus;
  statusMessage: string | null;
  at: number;
}

/** A claimed delivery: the change, the subscription it goes to, and how many attempts it had (this one included). */
export interface ClaimedDelivery extends LoggedChange {
  subId: string;
  name: EventName;
  url: string;
  secret: string;
  attempts: number;
  /** The task as the claim read it (null: gone or expired), when the backend reads it there (PostgreSQL: no second
   *  round trip before the POST); absent: the sender reads it. */
  task?: TaskRecord | null;
}

/** A claimed `terminated` control envelope (the subscription was ended server-side: an operator deactivated it).
 *  Its delivery row's `seq` is minus the time it was written, so it never meets a log position. */
export interface ClaimedControl {
  type: 'terminated';
  subId: string;
  seq: number;
  url: string;
  secret: string;
  attempts: number;
}

/** A delivering replica as `EventStore.claimOnCommit` sees it. */
export interface CommitClaimer {
  replica: string;
  /** The claim's lease, as a claim round's: past it another replica may claim (and send) the delivery. */
  claimMs: number;
  /** How many deliveries one write may claim now (reserved until `take`); 0: none, they wait for a claim round. */
  reserve(): number;
  /** After the write: what it claimed (attempt 1, the task read with it), and the room it had reserved, given back. */
  take(claimed: ClaimedDelivery[], reserved: number): void;
}

export type { DeliveryOutcome } from './delivery.js';

export interface EventFilter {
  name: EventName;
  taskId: string | null;
  tool: string | null;
}

export interface EventStore {
  /** Upserts a subscription on its key (refresh: new secret, grant, reactivated, failures reset). `limit`: live
   *  subscriptions one principal may hold; a new one past it is refused ('limit'), a refresh never is. */
  subscribe(s: NewSubscription, limit: number): Promise<'created' | 'refreshed' | 'limit'>;
  /** Removes the subscription and its pending deliveries. Returns whether there was one. */
  unsubscribe(key: SubscriptionKey): Promise<boolean>;
  get(subId: string): Promise<SubscriptionRecord | undefined>;
  /** Live (unexpired) subscriptions of `principal`. */
  live(principal: string, now: number): Promise<number>;
  /** When a subscription of `principal` to `url` last passed the challenge (the verification cache). */
  verifiedAt(principal: string, url: string): Promise<number | null>;
  markVerified(subId: string, now: number): Promise<void>;
  /** Subscriptions for the dashboard, newest first (optionally one principal's). */
  list(principal: string | undefined, limit: number): Promise<SubscriptionRecord[]>;
  /** An operator stops a subscription's deliveries (a refresh by its owner turns it on again) and, in the same write,
   *  queues its `terminated` envelope (a refresh before it is sent drops it). */
  deactivate(subId: string, operator: string, now: number): Promise<boolean>;
  /** Claims up to `limit` due deliveries of live, active subscriptions for `claimMs` (PostgreSQL: SKIP LOCKED). */
  claim(replica: string, now: number, claimMs: number, limit: number): Promise<ClaimedDelivery[]>;
  /** Optional (PostgreSQL): the deliveries of a task's terminal state written by this process (`finish`) are claimed
   *  for `claimer` in the finishing statement itself, and handed to it once that statement returns. Returns the undo. */
  claimOnCommit?(claimer: CommitClaimer): () => void;
  /** Claims due `terminated` envelopes of live subscriptions (inactive ones: that is why they are sent); settled like events. */
  claimControl(replica: string, now: number, claimMs: number, limit: number): Promise<ClaimedControl[]>;
  settle(subId: string, seq: number, replica: string, outcome: DeliveryOutcome): Promise<void>;
  /** The newest position of the log (a cursor "from now"). */
  head(): Promise<number>;
  /** `principal`'s changes after `afterSeq` matching `filter`, oldest first. */
  read(principal: string, filter: EventFilter, afterSeq: number, limit: number): Promise<LoggedChange[]>;
  /** Drops log rows older than `before` with nothing pending, and subscriptions expired before `expiredBefore`. */
  prune(before: number, expiredBefore: number): Promise<void>;
}

/** Which log statuses an event name matches (SQL over a `status` column); an output subscription matches none (its
 *  items come from the task's output log, not the change log). */
export function statusMatch(column: string, nameColumn: string): string {
  return `CASE ${nameColumn} WHEN '${TASK_FINISHED}' THEN ${column} IN ('completed','failed','cancelled')
    WHEN '${TASK_INPUT_REQUIRED}' THEN ${column} = 'input_required' WHEN '${TASK_STATUS}' THEN 1 = 1 ELSE 1 = 0 END`;
}

export function filterWhere(f: EventFilter): string {
  if (f.name === TASK_FINISHED) return `status IN ('completed','failed','cancelled')`;
  if (f.name === TASK_INPUT_REQUIRED) return `status = 'input_required'`;
  return '1 = 1';
}

/** The subscription columns every backend reads, by name (a later column changes no result shape). */
export const SUBSCRIPTION_COLUMNS = 'sub_id, principal, url, name, args, task_id, tool, secret, refresh_before, active, created_at, failures, ' +
  'verified_at, last_status, last_error, last_delivery_at, deactivated_by';

/** `columns` (a comma-separated list) of the table aliased `alias`. */
export function ofAlias(alias: string, columns: string): string {
  return columns.split(', ').map((c) => `${alias}.${c}`).join(', ');
}

export interface SubscriptionRow {
  sub_id: string;
  principal: string;
  url: string;
  name: string;
  args: string;
  task_id: string | null;
  tool: string | null;
  secret: string;
  refresh_before: number | string | null;
  active: number | boolean;
  created_at: number | string;
  failures: number;
  verified_at: number | string | null;
  last_status: number | null;
  last_error: string | null;
  last_delivery_at: number | string | null;
  deactivated_by: string | null;
  pending?: number | string;
}

const n = (v: number | string | null | undefined): number | null => (v === null || v === undefined ? null : Number(v));

export function toSubscription(r: SubscriptionRow): SubscriptionRecord {
  return {
    subId: r.sub_id,
    principal: r.principal,
    url: r.url,
    name: r.name as SubscribableName,
    args: r.args,
    taskId: r.task_id,
    tool: r.tool,
    secret: r.secret,
    refreshBefore: n(r.refresh_before),
    now: Number(r.created_at),
    createdAt: Number(r.created_at),
    active: r.active === true || r.active === 1,
    failures: r.failures,
    verifiedAt: n(r.verified_at),
    lastStatus: r.last_status,
    lastError: r.last_error,
    lastDeliveryAt: n(r.last_delivery_at),
    deactivatedBy: r.deactivated_by,
    pending: Number(r.pending ?? 0),
  };
}

/** The change-log columns every backend reads, by name. */
export const LOG_COLUMNS = 'seq, principal, task_id, tool, status, status_message, at';

export interface LogRow {
  seq: number | string;
  principal: string;
  task_id: string;
  tool: string;
  status: string;
  status_message: string | null;
  at: number | string;
}

export function toChange(r: LogRow): LoggedChange {
  return { seq: Number(r.seq), principal: r.principal, taskId: r.task_id, tool: r.tool, status: r.status as TaskStatus, statusMessage: r.status_message, at: Number(r.at) };
}

export type ClaimRow = LogRow & { sub_id: string; name: string; url: string; secret: string; attempts: number };

export function toClaimed(r: ClaimRow): ClaimedDelivery {
  return { ...toChange(r), subId: r.sub_id, name: r.name as EventName, url: r.url, secret: r.secret, attempts: r.attempts };
}
