/** The dashboard's actions (POST forms): sign-in and out, cancel, acknowledge, an operator's answer, bulk actions and
 *  deactivating an event subscription. A form from another origin, without its CSRF value, or from a read-only
 *  operator is refused before anything is done; each action is logged by the operator's name. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { answeredByOf, isTerminal } from '../../protocol/index.js';
import { QUEUE_SIGNAL_ID } from '../../store/local-bus.js';
import type { ListCursor } from '../../store/types.js';
import { readForm as readAnswerForm } from '../answer-form.js';
import type { Operator } from './auth.js';
import { errorPage, filterQuery, loginPage } from './pages.js';
import { filterFrom, readForm } from './forms.js';
import type { DashboardScope } from './scope.js';

const BULK_MAX = 1000;

export function dashboardActions(scope: DashboardScope): { post(req: IncomingMessage, res: ServerResponse, rest: string): Promise<void> } {
  const { o, base, auth, log, send, redirect, ctxOf, sessionCookie, sameOrigin } = scope;
  const safeBack = (v: string | null, fallback: string) => (v && (v === base || v.startsWith(`${base}/`)) && !v.startsWith('//') ? v : fallback);

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
    // A form posted from another site, or from an opaque (`null`) origin, is refused before anything else: the
    // sign-in too, so no other site can sign a browser in as someone else.
    if (!sameOrigin(req)) return send(res, 403, 'Forbidden: this form was not posted from the dashboard\n', 'text/plain; charset=utf-8');
    const form = await readForm(req);
    if (form === 'too-large') return send(res, 413, 'Form too large\n', 'text/plain; charset=utf-8');
    if (form === 'bad-type') return send(res, 415, 'Actions are HTML forms: send application/x-www-form-urlencoded\n', 'text/plain; charset=utf-8');
    if (rest === '/login') {
      const s = await auth.signIn(form.get('token') ?? '');
      if (!s) return send(res, 401, loginPage(base, 'Unknown operator token.'));
      log('operator signed in', { operator: s.operator.name, role: s.operator.role });
      return redirect(res, base, { 'set-cookie': sessionCookie(req, s.cookie) });
    }
    const op = await auth.identify(req);
    if (!op) return send(res, 401, loginPage(base, 'Sign in first.'));
    if (!auth.csrfOk(op, form.get('_csrf') ?? undefined)) return send(res, 403, errorPage(base, ctxOf(op), 'Refused', 'This form is missing its CSRF value or carries a wrong one; reload the page and try again.'));
    if (rest === '/logout') {
      await auth.signOut(op);
      log('operator signed out', { operator: op.name });
      return redirect(res, `${base}/login`, { 'set-cookie': sessionCookie(req) });
    }
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

  return { post };
}
