/** The dashboard's pages (GET): the overview, the task list and a task, tools, alerts and event subscriptions. */
import type { ServerResponse } from 'node:http';
import type { ListCursor } from '../../store/types.js';
import type { Operator } from './auth.js';
import { OUTPUT_SHOWN, outputTail } from './output.js';
import { TOOL_WINDOWS, errorPage, listPage, overviewPage, taskPage, toolsPage } from './pages.js';
import { alertsPage } from './alerts.js';
import { subscriptionsPage } from './subscriptions.js';
import { decodeCursor, encodeCursor, filterFrom } from './forms.js';
import { PAGE_SIZE, type DashboardScope } from './scope.js';

/** Most finished tasks the tools page reads (the most recent ones of its window): its cost does not grow with the store. */
const TOOL_STATS_CAP = 2000;

export type DashboardView = (res: ServerResponse, op: Operator, q: URLSearchParams) => Promise<void>;

export function dashboardViews(scope: DashboardScope): { overview: DashboardView; list: DashboardView; tools: DashboardView; alerts: DashboardView; subscriptions: DashboardView; task(res: ServerResponse, op: Operator, taskId: string): Promise<void> } {
  const { o, base, send, ctxOf, layoutOf } = scope;
  const leaseMs = o.leaseMs ?? 30_000;
  /** Rows of the queued and parked panels of the overview. */
  const IDLE_ROWS = 20;

  async function overview(res: ServerResponse, op: Operator) {
    const [counts, unread, waiting, queued, queueDepth, parked, replicas, alerts] = await Promise.all([
      o.store.ops.counts(10_000),
      o.store.ops.listTasks({ unread: true }, undefined, 20).then((p) => p.rows),
      o.store.ops.waiting(20),
      o.store.ops.queued(IDLE_ROWS),
      o.store.queueDepth(),
      o.store.ops.parked(IDLE_ROWS + 1),
      o.store.listReplicas(),
      o.store.ops.listAlerts(undefined, 10),
    ]);
    const idle = { queued, queueDepth, parked: parked.slice(0, IDLE_ROWS), moreParked: parked.length > IDLE_ROWS };
    send(res, 200, layoutOf(op, 'Overview', overviewPage(ctxOf(op), { counts, unread, waiting, idle, replicas, leaseMs, alerts }), true));
  }

  async function list(res: ServerResponse, op: Operator, q: URLSearchParams) {
    const parsed = filterFrom(q, Date.now());
    if (typeof parsed === 'string') return send(res, 400, errorPage(base, ctxOf(op), 'Bad filter', parsed));
    const c = decodeCursor(q.get('after'));
    const after: ListCursor | undefined = c ? { createdAt: c.a, taskId: c.b } : undefined;
    const page = await o.store.ops.listTasks(parsed.filter, after, PAGE_SIZE);
    const next = page.next ? encodeCursor({ a: page.next.createdAt, b: page.next.taskId }) : undefined;
    const notice = q.get('notice') ?? undefined;
    send(res, 200, layoutOf(op, 'Tasks', listPage(ctxOf(op), parsed.filter, parsed.olderThanMin, page.rows, next, notice?.slice(0, 200), page.scanned), true));
  }

  async function task(res: ServerResponse, op: Operator, taskId: string) {
    const t = await o.store.ops.detail(taskId);
    if (!t) return send(res, 404, errorPage(base, ctxOf(op), 'Unknown task', `No stored task has the id ${taskId} (it may have expired).`));
    const queued = t.queuedAt !== null && t.parkedAt === null;
    const [events, steps, position, output] = await Promise.all([
      o.store.ops.history(taskId, 200),
      o.store.listSteps(taskId),
      queued ? o.store.queuePosition(taskId) : Promise.resolve(undefined),
      outputTail(o.store, taskId, t.principal, OUTPUT_SHOWN),
    ]);
    send(res, 200, layoutOf(op, `Task ${taskId}`, taskPage(ctxOf(op), t, events, !!o.showPayloads, { steps, position, output })));
  }

  async function tools(res: ServerResponse, op: Operator, q: URLSearchParams) {
    const key = q.get('window') || '1h';
    const w = Object.hasOwn(TOOL_WINDOWS, key) ? TOOL_WINDOWS[key] : undefined;
    if (!w) return send(res, 400, errorPage(base, ctxOf(op), 'Bad window', `The window is one of ${Object.keys(TOOL_WINDOWS).join(', ')}.`));
    const stats = await o.store.ops.toolStats(Date.now() - w.ms, TOOL_STATS_CAP);
    send(res, 200, layoutOf(op, 'Tools', toolsPage(ctxOf(op), stats, key, TOOL_STATS_CAP), true));
  }

  async function alerts(res: ServerResponse, op: Operator, q: URLSearchParams) {
    const c = decodeCursor(q.get('after'));
    const rows = await o.store.ops.listAlerts(c ? { createdAt: c.a, alertId: c.b } : undefined, PAGE_SIZE + 1);
    const page = rows.slice(0, PAGE_SIZE);
    const last = page[page.length - 1];
    send(res, 200, layoutOf(op, 'Alerts', alertsPage(ctxOf(op), page, rows.length > PAGE_SIZE && last ? encodeCursor({ a: last.createdAt, b: last.alertId }) : undefined), true));
  }

  async function subscriptions(res: ServerResponse, op: Operator, q: URLSearchParams) {
    const principal = q.get('principal') || undefined;
    const rows = await o.store.events.list(principal, 200);
    send(res, 200, layoutOf(op, 'Subscriptions', subscriptionsPage(ctxOf(op), rows, principal, q.get('notice') ?? undefined), true));
  }

  return { overview: (res, op) => overview(res, op), list, task, tools, alerts, subscriptions };
}
