/**
 * The operations dashboard: server-rendered pages over the store's operator queries, plain POST forms for actions
 * (each with a CSRF value), and an event stream that keeps open pages current. Mounted by `serveHttp({dashboard})`
 * at /dashboard, or served alone by `outlast dashboard --store URL`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { answeredByOf, isTerminal, type TaskStatus } from '../../protocol/index.js';
import { QUEUE_SIGNAL_ID, type SignalBus } from '../../store/local-bus.js';
import { readForm as readAnswerForm } from '../answer-form.js';
import type { ListCursor, OpsTaskFilter, TaskStore } from '../../store/types.js';
import { OperatorAuth, COOKIE, type Operator, type OperatorTokens } from './auth.js';
import { LIVE_JS, STYLE_CSS } from './assets.js';
import type { Html } from './html.js';
import { LiveHub } from './live.js';
import { subscriptionsPage } from './subscriptions.js';
import { OUTPUT_SHOWN, outputTail } from './output.js';
import { STATUSES, TOOL_WINDOWS, alertsPage, errorPage, filterQuery, layout, listPage, loginPage, overviewPage, taskPage, toolsPage, type PageContext } from './pages.js';

export { OperatorAuth, type Operator, type OperatorTokens } from './auth.js';

export interface DashboardOptions extends OperatorTokens {
  store: TaskStore;
  bus: SignalBus;
  /** The interface the server listens on: without operator tokens the dashboard refuses anything but loopback. */
  host: string;
  /** Default /dashboard. */
  basePath?: string;
  /** A replica whose heartbeat is older than this is shown lost. Default 30 000 ms. */
  leaseMs?: number;
  /** Show task arguments and results on task pages. Default false. */
  showPayloads?: boolean;
  /** Shown in the header (an environment badge, e.g. "production"). Default: the store's backend. */
  title?: string;
  /** Actions are logged here (who did what). */
  log?: (msg: string, extra: Record<string, unknown>) => void;
}

export interface Dashboard {
  readonly basePath: string;
  /** Whether this request is for the dashboard (its path is under basePath). */
  owns(pathname: string): boolean;
  handle(req: IncomingMessage, res: ServerResponse): Promise<void>;
  close(): void;
}

const PAGE_SIZE = 50;
/** Most finished tasks the tools page reads (the most recent ones of its window): its cost does not grow with the store. */
const TOOL_STATS_CAP = 2000;
const BULK_MAX = 1000;
const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'same-origin',
  'cache-control': 'no-store',
};

export function isLoopbackHost(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** Throws (with what to do) when the dashboard would be open to a network without operator tokens. */
export function checkDashboardExposure(host: string, tokens: OperatorTokens): void {
  const any = Object.keys(tokens.operators ?? {}).length + Object.keys(tokens.readonly ?? {}).length > 0;
  if (!any && !isLoopbackHost(host)) {
    throw new Error(`Refusing to serve the dashboard on ${host} without operator tokens: anyone who can reach it could cancel tasks. Add --operator TOKEN=NAME (or --operator-readonly), or listen on 127.0.0.1`);
  }
}

function encodeCursor(c: { a: number; b: string }): string {
  return Buffer.from(`${c.a}:${c.b}`).toString('base64url');
}
function decodeCursor(s: string | null): { a: number; b: string } | undefined {
  if (!s || s.length > 400 || !/^[A-Za-z0-9_-]+$/.test(s)) return undefined;
  const m = /^(\d{1,15}):(.{1,200})$/s.exec(Buffer.from(s, 'base64url').toString('utf8'));
  return m ? { a: Number(m[1]), b: m[2]! } : undefined;
}

function readForm(req: IncomingMessage, limit = 16_384): Promise<URLSearchParams | 'too-large' | 'bad-type'> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    req.resume();
    return Promise.resolve('bad-type');
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        resolve('too-large');
        req.destroy();
      } else chunks.push(c);
    });
    req.once('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
    req.once('error', reject);
  });
}

/** A filter from query or form fields; anything unexpected is refused with the reason. */
function filterFrom(p: URLSearchParams, now: number): { filter: OpsTaskFilter; olderThanMin?: string } | string {
  const f: OpsTaskFilter = {};
  const status = p.get('status');
  if (status) {
    if (!STATUSES.includes(status as TaskStatus)) return `Unknown state "${status}"`;
    f.status = status as TaskStatus;
  }
  for (const k of ['tool', 'principal'] as const) {
    const v = p.get(k);
    if (v) {
      if (v.length > 200) return `${k} is too long`;
      f[k] = v;
    }
  }
  if (p.get('unread')) f.unread = true;
  const older = p.get('olderThanMin');
  if (older) {
    const n = Number(older);
    if (!Number.isFinite(n) || n < 0 || n > 10_000_000) return 'Older than must be a number of minutes';
    f.createdBefore = now - Math.round(n * 60_000);
    return { filter: f, olderThanMin: older };
  }
  return { filter: f };
}

export function createDashboard(o: DashboardOptions): Dashboard {
  checkDashboardExposure(o.host, o);
  const base = (o.basePath ?? '/dashboard').replace(/\/$/, '');
  const auth = new OperatorAuth(o);
  const hub = new LiveHub({ store: o.store, bus: o.bus });
  const leaseMs = o.leaseMs ?? 30_000;
  const title = o.title ?? `${o.store.backend} store`;
  const log = o.log ?? (() => undefined);

  const send = (res: ServerResponse, status: number, body: Html | string, type = 'text/html; charset=utf-8', extra: Record<string, string> = {}) => {
    res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type, ...extra });
    res.end(typeof body === 'string' ? body : body.value);
  };
  const redirect = (res: ServerResponse, to: string, extra: Record<string, string> = {}) => {
    res.writeHead(303, { ...SECURITY_HEADERS, location: to, ...extra });
    res.end();
  };
  const safeBack = (v: string | null, fallback: string) => (v && (v === base || v.startsWith(`${base}/`)) && !v.startsWith('//') ? v : fallback);
  const ctxOf = (op: Operator): PageContext => ({ base, operator: op, csrf: auth.csrf(op), title, now: Date.now() });

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

  function layoutOf(op: Operator, pageTitle: string, body: Html, refresh = false): Html {
    return layout(ctxOf(op), base, pageTitle, body, { refresh });
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

  /** Records an operator's cancel and tells every replica (the one running the handler aborts it). */
  async function cancel(op: Operator, taskId: string, reason: string): Promise<'cancelled' | 'finished' | 'missing'> {
    const rec = await o.store.ops.cancel(taskId, op.name, reason, Date.now());
    if (!rec) return 'missing';
    if (isTerminal(rec.status)) return 'finished';
    o.bus.publish({ taskId, kind: 'cancel' });
    o.bus.publish({ taskId, kind: 'changed' });
    log('operator cancelled a task', { taskId, tool: rec.tool, principal: rec.principal, operator: op.name, reason });
    return 'cancelled';
  }

  /** An operator answers a question asked with answeredBy 'operator' (checked against its schema; logged by name). */
  async function answer(res: ServerResponse, op: Operator, taskId: string, form: URLSearchParams, back: string) {
    const key = form.get('key') ?? '';
    const l = await o.store.get(taskId);
    const pending = l.state === 'found' ? l.record.inputRequests[key] : undefined;
    if (!pending) return send(res, 410, errorPage(base, ctxOf(op), 'Nothing to answer', `Task ${taskId} does not wait for "${key}" (answered, timed out, or ended).`));
    if (pending.request.method !== 'elicitation/create' || answeredByOf(pending.request) !== 'operator') {
      return send(res, 403, errorPage(base, ctxOf(op), 'Not for operators', `Question "${key}" is answered by the task's user, not on the dashboard.`));
    }
    let response: Record<string, unknown>;
    if (form.get('action') === 'decline') response = { action: 'decline' };
    else {
      const read = readAnswerForm(((pending.request.params ?? {}) as Record<string, unknown>).requestedSchema as never ?? {}, form);
      if ('errors' in read) return send(res, 400, errorPage(base, ctxOf(op), 'Answer does not fit', Object.entries(read.errors).map(([f, e]) => `${f} ${e}`).join('; ')));
      response = { action: 'accept', content: read.content };
    }
    const { accepted, record } = await o.store.answerInput(taskId, { [key]: response as never }, Date.now());
    if (accepted.length === 0) return send(res, 410, errorPage(base, ctxOf(op), 'Not recorded', `Question "${key}" was answered or timed out meanwhile.`));
    o.bus.publish({ taskId, kind: 'input' });
    o.bus.publish({ taskId, kind: 'changed' });
    if (record.parkedAt !== null && record.queuedAt !== null && record.queuedAt <= Date.now()) o.bus.publish({ taskId: QUEUE_SIGNAL_ID, kind: 'queue' });
    log('operator answered a question', { taskId, key, operator: op.name, action: String(response.action) });
    redirect(res, back);
  }

  async function acknowledge(op: Operator, taskId: string): Promise<boolean> {
    const ok = await o.store.ops.acknowledge(taskId, op.name, Date.now());
    if (ok) {
      o.bus.publish({ taskId, kind: 'changed' });
      log('operator acknowledged a failure', { taskId, operator: op.name });
    }
    return ok;
  }

  async function bulk(res: ServerResponse, op: Operator, form: URLSearchParams) {
    const parsed = filterFrom(form, Date.now());
    if (typeof parsed === 'string') return send(res, 400, errorPage(base, ctxOf(op), 'Bad filter', parsed));
    const action = form.get('action');
    const reason = (form.get('reason') ?? '').trim();
    if (action !== 'cancel' && action !== 'acknowledge') return send(res, 400, errorPage(base, ctxOf(op), 'Bad request', 'action must be cancel or acknowledge'));
    if (action === 'cancel' && (!reason || reason.length > 500)) return send(res, 400, errorPage(base, ctxOf(op), 'Reason needed', 'Say why these tasks must stop (at most 500 characters).'));
    // Acknowledge works on unread failures only; cancel on unfinished tasks only. Bounded: BULK_MAX tasks a request.
    const filter = action === 'acknowledge' ? { ...parsed.filter, unread: true } : parsed.filter;
    let done = 0;
    let seen = 0;
    let after: ListCursor | undefined;
    // Pages of the filter until it is exhausted or BULK_MAX tasks were looked at (combined filters read in bounds).
    while (seen < BULK_MAX) {
      const page = await o.store.ops.listTasks(filter, after, 200);
      for (const t of page.rows) {
        seen++;
        if (action === 'cancel' && !isTerminal(t.status) && !t.cancelRequestedAt) done += (await cancel(op, t.taskId, reason)) === 'cancelled' ? 1 : 0;
        if (action === 'acknowledge') done += (await acknowledge(op, t.taskId)) ? 1 : 0;
      }
      seen += page.scanned ?? 0;
      if (!page.next) break;
      after = page.next;
    }
    const what = action === 'cancel' ? 'cancel requested for' : 'acknowledged';
    const notice = `${what} ${done} task${done === 1 ? '' : 's'}${seen >= BULK_MAX ? ` (stopped after ${BULK_MAX} matches; run it again for more)` : ''}`;
    redirect(res, `${base}/tasks?${filterQuery(parsed.filter, parsed.olderThanMin)}&notice=${encodeURIComponent(notice)}`);
  }

  async function post(req: IncomingMessage, res: ServerResponse, rest: string) {
    // A form posted from another site is refused before anything else (browsers send Origin on POST).
    const origin = req.headers.origin;
    if (origin && origin !== 'null') {
      let ok = false;
      try {
        ok = new URL(origin).host === req.headers.host;
      } catch {
        ok = false;
      }
      if (!ok) return send(res, 403, 'Forbidden: this form was not posted from the dashboard\n', 'text/plain; charset=utf-8');
    }
    const form = await readForm(req);
    if (form === 'too-large') return send(res, 413, 'Form too large\n', 'text/plain; charset=utf-8');
    if (form === 'bad-type') return send(res, 415, 'Actions are HTML forms: send application/x-www-form-urlencoded\n', 'text/plain; charset=utf-8');
    if (rest === '/login') {
      const s = auth.signIn(form.get('token') ?? '');
      if (!s) return send(res, 401, loginPage(base, 'Unknown operator token.'));
      log('operator signed in', { operator: s.operator.name, role: s.operator.role });
      const secure = (req.socket as { encrypted?: boolean }).encrypted ? '; Secure' : '';
      return redirect(res, base, { 'set-cookie': `${COOKIE}=${s.cookie}; Path=${base}; HttpOnly; SameSite=Strict${secure}` });
    }
    const op = auth.identify(req);
    if (!op) return send(res, 401, loginPage(base, 'Sign in first.'));
    if (!auth.csrfOk(op, form.get('_csrf') ?? undefined)) return send(res, 403, errorPage(base, ctxOf(op), 'Refused', 'This form is missing its CSRF value or carries a wrong one; reload the page and try again.'));
    if (rest === '/logout') return redirect(res, `${base}/login`, { 'set-cookie': `${COOKIE}=; Path=${base}; HttpOnly; SameSite=Strict; Max-Age=0` });
    if (op.role !== 'act') return send(res, 403, errorPage(base, ctxOf(op), 'Read-only', `${op.name} may look but not act.`));
    if (rest === '/bulk') return bulk(res, op, form);
    const d = /^\/subscriptions\/(sub_[0-9a-f]{32})\/deactivate$/.exec(rest);
    if (d) {
      const done = await o.store.events.deactivate(d[1]!, op.name, Date.now());
      if (done) log('operator deactivated an event subscription', { subscription: d[1], operator: op.name });
      return redirect(res, `${base}/subscriptions?notice=${encodeURIComponent(done ? `${d[1]} deactivated` : `${d[1]} was not active`)}`);
    }
    const m = /^\/tasks\/([^/]{1,200})\/(cancel|acknowledge|answer)$/.exec(rest);
    if (!m) return send(res, 404, errorPage(base, ctxOf(op), 'Not found', 'No such action.'));
    const taskId = decodeURIComponent(m[1]!);
    const back = safeBack(form.get('back'), `${base}/tasks/${encodeURIComponent(taskId)}`);
    if (m[2] === 'answer') return answer(res, op, taskId, form, back);
    if (m[2] === 'cancel') {
      const reason = (form.get('reason') ?? '').trim();
      if (!reason || reason.length > 500) return send(res, 400, errorPage(base, ctxOf(op), 'Reason needed', 'Say why this task must stop (at most 500 characters).'));
      const r = await cancel(op, taskId, reason);
      if (r === 'missing') return send(res, 404, errorPage(base, ctxOf(op), 'Unknown task', `No stored task has the id ${taskId}.`));
      return redirect(res, back);
    }
    await acknowledge(op, taskId);
    redirect(res, back);
  }

  return {
    basePath: base,
    owns: (pathname) => pathname === base || pathname.startsWith(`${base}/`),
    async handle(req, res) {
      try {
        const url = new URL(req.url ?? '/', 'http://dashboard');
        const rest = url.pathname.slice(base.length) || '/';
        if (req.method === 'GET' && rest === '/assets/live.js') return send(res, 200, LIVE_JS, 'text/javascript; charset=utf-8');
        if (req.method === 'GET' && rest === '/assets/style.css') return send(res, 200, STYLE_CSS, 'text/css; charset=utf-8');
        if (req.method === 'GET' && rest === '/login') return send(res, 200, loginPage(base));
        if (req.method === 'POST') return await post(req, res, rest);
        if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'Method not allowed\n', 'text/plain; charset=utf-8', { allow: 'GET, POST' });
        const op = auth.identify(req);
        if (!op) return send(res, 401, loginPage(base), 'text/html; charset=utf-8', { 'www-authenticate': 'Bearer realm="outlast-dashboard"' });
        if (rest === '/' || rest === '') return await overview(res, op);
        if (rest === '/tasks') return await list(res, op, url.searchParams);
        if (rest === '/alerts') return await alerts(res, op, url.searchParams);
        if (rest === '/tools') return await tools(res, op, url.searchParams);
        if (rest === '/subscriptions') {
          const principal = url.searchParams.get('principal') || undefined;
          const rows = await o.store.events.list(principal, 200);
          return send(res, 200, layoutOf(op, 'Subscriptions', subscriptionsPage(ctxOf(op), rows, principal, url.searchParams.get('notice') ?? undefined), true));
        }
        if (rest === '/events') {
          if (!hub.open(res, SECURITY_HEADERS)) send(res, 503, 'Too many open dashboard streams\n', 'text/plain; charset=utf-8', { 'retry-after': '10' });
          return;
        }
        const m = /^\/tasks\/([^/]{1,200})$/.exec(rest);
        if (m) return await task(res, op, decodeURIComponent(m[1]!));
        send(res, 404, errorPage(base, ctxOf(op), 'Not found', 'No such page.'));
      } catch (e) {
        log('dashboard request failed', { error: String(e) });
        if (!res.headersSent) send(res, 500, 'The dashboard could not read the store; retry shortly\n', 'text/plain; charset=utf-8');
        else res.end();
      }
    },
    close: () => hub.close(),
  };
}
