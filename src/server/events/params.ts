/** The checks of an events/* request's params: the event name, its arguments (only the caller's own tasks), the
 *  cursor, the caller's authentication, a webhook's delivery. Each failure is an EventsError naming what to send. */
import { EVENT_NAMES, TASK_STATUS, type EventFilter, type EventName } from '../../store/events.js';
import type { TaskStore } from '../../store/types.js';
import { callbackUrlProblem } from '../../ops/events/index.js';
import { TASK_OUTPUT, type TaskOutputEvents } from './task-output.js';
import { canonicalJson } from './canonical.js';
import { EventErrorCode, EventsError, type EventsWireOptions, type Params } from './wire-options.js';

/** What the wire's steps share: its options, the store, and task output's own reader. */
export interface WireScope {
  o: EventsWireOptions;
  store: TaskStore;
  output: TaskOutputEvents;
  /** How often poll and stream re-read the log while waiting, ms. */
  readEveryMs: number;
}

const MAX_ARGS_BYTES = 2048;

export const isOutput = (p: Params) => p.name === TASK_OUTPUT;

export function parseName(p: Params): EventName {
  if (typeof p.name !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'params.name must be an event name (see events/list)');
  if (!(EVENT_NAMES as readonly string[]).includes(p.name)) throw new EventsError(EventErrorCode.NotFound, `Unknown event ${JSON.stringify(p.name.slice(0, 100))}; this server offers ${[...EVENT_NAMES, TASK_OUTPUT].join(', ')}`, { kind: 'event' });
  return p.name as EventName;
}

export async function parseArgs(store: TaskStore, name: EventName, p: Params, principal: string): Promise<{ canonical: string; filter: EventFilter }> {
  const a = p.arguments ?? {};
  if (typeof a !== 'object' || a === null || Array.isArray(a)) throw new EventsError(EventErrorCode.InvalidParams, 'params.arguments must be an object');
  const canonical = canonicalJson(a);
  if (canonical.length > MAX_ARGS_BYTES) throw new EventsError(EventErrorCode.InvalidParams, `params.arguments is larger than ${MAX_ARGS_BYTES} bytes; it only takes taskId and tool`);
  const allowed = name === TASK_STATUS ? ['taskId'] : ['taskId', 'tool'];
  for (const [k, v] of Object.entries(a)) {
    if (!allowed.includes(k)) throw new EventsError(EventErrorCode.InvalidParams, `Unknown argument "${k.slice(0, 100)}" for ${name}; it takes ${allowed.join(' and ')}`);
    if (typeof v !== 'string' || v.length === 0 || v.length > 256) throw new EventsError(EventErrorCode.InvalidParams, `Argument ${k} must be a non-empty string of at most 256 characters`);
  }
  const args = a as { taskId?: string; tool?: string };
  if (name === TASK_STATUS && args.taskId === undefined) throw new EventsError(EventErrorCode.InvalidParams, `${TASK_STATUS} needs a taskId argument (the task to follow)`);
  if (args.taskId !== undefined) {
    const t = await store.get(args.taskId);
    // Someone else's task reads exactly like an unknown one.
    if (t.state === 'missing' || (t.state === 'found' ? t.record.principal : t.principal) !== principal) throw new EventsError(EventErrorCode.InvalidParams, `Unknown task ${JSON.stringify(args.taskId)}`);
  }
  return { canonical, filter: { name, taskId: args.taskId ?? null, tool: args.tool ?? null } };
}

export async function parseCursor(store: TaskStore, c: unknown): Promise<number> {
  if (c === null || c === undefined) return store.events.head();
  if (typeof c !== 'string' || !/^\d{1,15}$/.test(c)) throw new EventsError(EventErrorCode.InvalidParams, 'cursor must be null (from now) or a cursor this server returned');
  return Number(c);
}

/** Without credentials every caller of this wire is `anonymous` (it has no session): it follows only a task it names
 *  by its id, never every task of that shared principal. */
export function needTaskWithoutCredentials(p: Params, authenticated: boolean, what: string): void {
  const a = p.arguments as { taskId?: unknown } | null | undefined;
  if (authenticated || (typeof a === 'object' && a !== null && a.taskId !== undefined)) return;
  throw new EventsError(EventErrorCode.Forbidden, `${what} without a taskId argument needs credentials: callers without them share one principal (anonymous), so each follows only the tasks it names by id`);
}

export function needPrincipal(authenticated: boolean, what: string): void {
  if (!authenticated) throw new EventsError(EventErrorCode.Forbidden, `${what} needs an authenticated principal (webhooks are bound to who subscribed): send credentials`);
}

export function webhookParams(p: Params, o: EventsWireOptions): { url: string; secret: unknown } {
  const d = p.delivery;
  if (typeof d !== 'object' || d === null || Array.isArray(d)) throw new EventsError(EventErrorCode.InvalidParams, 'params.delivery must be {mode: "webhook", url, secret}');
  const delivery = d as Params;
  if (delivery.mode !== undefined && delivery.mode !== 'webhook') throw new EventsError(EventErrorCode.Unsupported, `Delivery mode ${JSON.stringify(delivery.mode)} is not served by events/subscribe; use webhook, or events/poll / events/stream`, { feature: 'deliveryMode', value: delivery.mode });
  const problem = callbackUrlProblem(delivery.url, o.policy);
  if (problem) throw new EventsError(EventErrorCode.InvalidParams, problem);
  return { url: new URL(delivery.url as string).toString(), secret: delivery.secret };
}
