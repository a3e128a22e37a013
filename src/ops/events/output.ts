/**
 * Webhook delivery of a task's output (`outlast.task.output`): a claimed subscription cursor (store/output-events.ts)
 * is sent the items after it, one signed POST each, in seq order, through the same attempt as every event (SSRF rules,
 * signature, retries under one webhook-id, deactivation). The cursor moves only when an item is settled, so a failure,
 * a lost claim or a killed replica resumes at the same item (the same webhook-id) from whichever replica claims next.
 * A cursor older than the retained output gets a signed `gap` envelope naming `events_gone` and the earliest retained
 * seq before anything after it; once the task is terminal and everything went, a signed `terminated` envelope
 * (`task_terminal`, the same error events/stream ends with) and the subscription is removed.
 */
import type { TaskStatus } from '../../protocol/index.js';
import { isTerminal } from '../../protocol/index.js';
import type { DeliveryOutcome } from '../../store/events.js';
import { cursorGone, type OutputItem } from '../../store/output.js';
import { TASK_OUTPUT, type ClaimedOutput } from '../../store/output-events.js';
import type { Logger } from '../../runtime/types.js';
import type { TaskStore } from '../../store/types.js';

/** Items one claim sends before letting other subscriptions have a turn. */
const ITEMS_PER_CLAIM = 200;
const PAGE = 100;

export interface OutputOccurrence {
  eventId: string;
  name: string;
  timestamp: string;
  data: { taskId: string; seq: number; type: string; data: unknown };
  cursor: string;
}

/** Stable per item: the task and the item's seq (the same on every replay, retry and replica). */
export function outputOccurrence(taskId: string, i: OutputItem): OutputOccurrence {
  return { eventId: `evt_${taskId}_out_${i.seq}`, name: TASK_OUTPUT, timestamp: new Date(i.at).toISOString(), data: { taskId, seq: i.seq, type: i.type, data: i.data }, cursor: String(i.seq) };
}

/** The error a subscription to a finished task's output ends with (stream and webhook: `terminated`; poll: the answer). */
export function outputEnded(taskId: string, status: TaskStatus, latestSeq: number) {
  return {
    code: -32011,
    message: `Task ${taskId} is ${status} and all of its output (up to seq ${latestSeq}) was delivered; read its result with tasks/get`,
    data: { kind: 'event', reason: 'task_terminal', taskId, status, latestSeq },
  };
}

/** The gap envelope of a cursor older than the retained output (where the receiver was, and where it goes on). */
export function outputGone(cursor: number, earliestSeq: number, latestSeq: number) {
  return { type: 'gap', cursor: String(cursor), reason: 'events_gone', earliestSeq, latestSeq };
}

type Result = 'delivered' | 'retry' | 'gap' | 'dropped' | 'stopped';

/** What the delivery loop lends this sender: its one attempt (signing, SSRF, retry rules) and its gap envelope. */
export interface OutputSender {
  store: TaskStore;
  replicaId: string;
  log: Logger;
  claimMs: number;
  attempt(d: Pick<ClaimedOutput, 'subId' | 'url' | 'secret' | 'attempts'>, webhookId: string, body: string, what: { name: string }, settle: (o: DeliveryOutcome) => Promise<unknown>): Promise<Result>;
  /** The best-effort `gap` envelope after an item given up (as for every event). */
  sendGap(d: { subId: string; seq: number; url: string; secret: string }): Promise<void>;
}

/** Sends what is due on one claimed cursor, in order, until nothing is left now, an attempt fails, or the claim is lost. */
export async function sendOutput(c: ClaimedOutput, s: OutputSender): Promise<void> {
  const { store, replicaId } = s;
  const hex = c.subId.slice('sub_'.length);
  let delivered = c.delivered;
  let attempts = c.attempts + 1;
  let held = true;
  /** One signed POST; the cursor moves to `to` when it is settled (delivered or given up). */
  const post = async (webhookId: string, body: string, to: number, name: string): Promise<Result> => {
    const r = await s.attempt({ ...c, attempts }, webhookId, body, { name }, async (o) => {
      held = await store.outputEvents.settle(c.subId, replicaId, to, o, Date.now() + s.claimMs);
    });
    if (r === 'delivered' || r === 'gap' || r === 'dropped') {
      delivered = to;
      attempts = 1;
    }
    return r;
  };
  try {
    for (let sent = 0; sent < ITEMS_PER_CLAIM && held; ) {
      const page = await store.output.read(c.taskId, c.principal, delivered, PAGE);
      if (!page) return void (await store.outputEvents.end(c.subId, replicaId)); // the task went (or is not the subscriber's)
      if (cursorGone(delivered, page)) {
        const earliest = page.first ?? page.last + 1;
        const r = await post(`msg_gap_${hex}_out_${earliest}`, JSON.stringify(outputGone(delivered, earliest, page.last)), earliest - 1, 'gap');
        if (r === 'retry' || r === 'stopped') return;
        continue;
      }
      if (page.items.length === 0) {
        if (isTerminal(page.status) && delivered >= page.last) {
          const r = await post(`msg_terminated_${hex}_end`, JSON.stringify({ type: 'terminated', error: outputEnded(c.taskId, page.status, page.last) }), delivered, 'terminated');
          if (held && r !== 'retry' && r !== 'stopped') await store.outputEvents.end(c.subId, replicaId);
          return;
        }
        break;
      }
      for (const item of page.items) {
        const r = await post(outputOccurrence(c.taskId, item).eventId, JSON.stringify(outputOccurrence(c.taskId, item)), item.seq, TASK_OUTPUT);
        if (r === 'retry' || r === 'stopped' || !held) return;
        if (r === 'gap') await s.sendGap({ subId: c.subId, seq: item.seq, url: c.url, secret: c.secret });
        sent++;
      }
    }
    if (held) await store.outputEvents.release(c.subId, replicaId);
  } catch (e) {
    s.log.warn('events: output delivery stopped; the claim lapses and it resumes at the same item', { subscription: c.subId, error: String(e) });
  }
}
