/**
 * Webhook delivery of a task's output (the `outlast.task.output` event): one cursor per subscription, the seq of the
 * last item that went to the endpoint (delivered, or given up with a gap envelope). Items are never copied: the
 * deliverer reads the task's output log after the cursor. A subscription's cursor is claimed by one replica at a time
 * (PostgreSQL: SKIP LOCKED), which sends the items after it in seq order, moving the cursor with each one it settles
 * (and renewing its claim); a failed attempt releases the claim until the retry is due, so the same item goes again
 * (one webhook-id) from whichever replica is free. Both backends implement OutputEventStore.
 */
import type { DeliveryOutcome } from './delivery.js';

/** The migration that adds the output cursors (both backends). */
export const OUTPUT_EVENTS_MIGRATION = 13;

/** The cursor table of migration 13, in a backend's column types. */
export function outputCursorsTable(t: { text: string; int: string; seq: string }): string {
  return `
-- One row per output subscription: the seq of the last item that went (delivered or given up), the attempts of the
-- next one, and the claim of the replica sending. Gone with its subscription or its task.
CREATE TABLE event_output_cursors (
  sub_id          ${t.text} PRIMARY KEY REFERENCES event_subscriptions (sub_id) ON DELETE CASCADE,
  task_id         ${t.text} NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  delivered_seq   ${t.seq} NOT NULL,
  attempts        ${t.int} NOT NULL DEFAULT 0,
  next_attempt_at ${t.seq} NOT NULL,
  claimed_by      ${t.text},
  claimed_until   ${t.seq}
);
-- Used by: the cascade from tasks (a task that leaves takes its cursors: the foreign key's lookup of them).
CREATE INDEX event_output_cursors_task ON event_output_cursors (task_id);
-- Used by: the cursor claim's scan for cursors whose next attempt is due (next_attempt_at <= now).
CREATE INDEX event_output_cursors_due ON event_output_cursors (next_attempt_at);`;
}

/** The event a task's output is delivered as (the task is its input). */
export const TASK_OUTPUT = 'outlast.task.output';

/** A claimed output cursor: where the subscription is, and where to send. */
export interface ClaimedOutput {
  subId: string;
  taskId: string;
  principal: string;
  url: string;
  secret: string;
  /** The seq of the last item settled (0: none). */
  delivered: number;
  /** Failed attempts of the next thing to send. */
  attempts: number;
}

export interface OutputEventStore {
  /** Claims up to `limit` cursors of live, active subscriptions with something to send (output after the cursor, or
   *  the task terminal: the end to tell), due now and not claimed, until `now + claimMs`. */
  claim(replica: string, now: number, claimMs: number, limit: number): Promise<ClaimedOutput[]>;
  /** Settles one attempt. Delivered, or given up (retryAt null): the cursor moves to `to`, attempts reset, and the
   *  claim is held until `holdUntil`. A failure to retry: attempts + 1, due at retryAt, the claim released. The
   *  subscription's counters (failures, deactivation) as for every event. false: this replica no longer held the claim. */
  settle(subId: string, replica: string, to: number, outcome: DeliveryOutcome, holdUntil: number): Promise<boolean>;
  /** Lets go of a claim with nothing left to send now. */
  release(subId: string, replica: string): Promise<void>;
  /** The task is terminal and everything (and the end) went: the subscription is removed. */
  end(subId: string, replica: string): Promise<void>;
}
