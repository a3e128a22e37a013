/** The dashboard's pages, server-rendered from store reads with escaped templates (see html.ts). */
import type { TaskStatus } from '../../protocol/index.js';
import type { AlertRecord, IdleTask, OpsCounts, OpsTaskDetail, OpsTaskFilter, OpsTaskRow, ReplicaInfo, StepRecord, TaskEvent, ToolStats, WaitingTask } from '../../store/types.js';
import { Html, html } from './html.js';
import { answeredByOf } from '../../protocol/index.js';
import { renderFields } from '../answer-form.js';
import { outputSection, type OutputTail } from './output.js';
import { ago, csrfField, iso, statusBadge, taskLink, type PageContext } from './format.js';
import { alertTargetNote, alertsTable } from './alerts.js';
import { standingFacts, taskLine } from './outcome.js';
import { cell, dataTable } from './table.js';

/** A question asked with answeredBy 'operator': the form an operator who may act answers it with. */
function operatorAnswerForm(ctx: PageContext, back: string, key: string, request: { method: string; params?: Record<string, unknown> | undefined }): Html | string {
  if (request.method !== 'elicitation/create' || answeredByOf(request) !== 'operator' || ctx.operator.role !== 'act') return '';
  const schema = (request.params?.requestedSchema ?? {}) as Record<string, unknown>;
  return html`<form method="post" action="${back}/answer" data-testid="operator-answer">${csrfField(ctx)}<input type="hidden" name="key" value="${key}">${new Html(renderFields(schema as never))}<button data-action="answer" name="action" value="accept">Answer as ${ctx.operator.name}</button> <button name="action" value="decline" formnovalidate>Decline</button></form>`;
}
export const STATUSES: TaskStatus[] = ['working', 'input_required', 'completed', 'failed', 'cancelled'];

export function layout(ctx: PageContext | undefined, base: string, title: string, body: Html, opts: { refresh?: boolean } = {}): Html {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · Outlast</title>
<link rel="stylesheet" href="${base}/assets/style.css">
${opts.refresh ? html`<noscript><meta http-equiv="refresh" content="10"></noscript>` : ''}
${ctx ? html`<script src="${base}/assets/live.js" defer></script>` : ''}
</head><body data-base="${base}">
<header><a class="brand" href="${base}">Outlast operations</a>
${ctx ? html`<span class="env">${ctx.title}</span>
<nav><a href="${base}">Overview</a> <a href="${base}/tasks">Tasks</a> <a href="${base}/tools">Tools</a> <a href="${base}/alerts">Alerts</a> <a href="${base}/subscriptions">Subscriptions</a></nav>
<span class="who" data-testid="operator">${ctx.operator.name} (${ctx.operator.role === 'act' ? 'may act' : 'read-only'})</span>
${ctx.operator.via === 'cookie' ? html`<form method="post" action="${base}/logout" class="inline"><input type="hidden" name="_csrf" value="${ctx.csrf}"><button>Sign out</button></form>` : ''}` : ''}
<span class="live-state" id="live-state">${opts.refresh ? 'reloads every 10 s' : ''}</span>
</header>
<main id="live">${body}</main>
</body></html>`;
}

export function loginPage(base: string, message?: string): Html {
  return layout(undefined, base, 'Sign in', html`<h1>Sign in</h1>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
<form method="post" action="${base}/login" class="login">
<label>Operator token <input type="password" name="token" autocomplete="current-password" required></label>
<button>Sign in</button></form>
<p class="hint">Scripts send <code>Authorization: Bearer TOKEN</code> instead.</p>`);
}

export function errorPage(base: string, ctx: PageContext | undefined, title: string, message: string): Html {
  return layout(ctx, base, title, html`<h1>${title}</h1><p class="error" role="alert">${message}</p><p><a href="${base}">Back to the overview</a></p>`);
}

function ackForm(ctx: PageContext, taskId: string, back: string): Html {
  if (ctx.operator.role !== 'act') return html``;
  return html`<form method="post" action="${ctx.base}/tasks/${encodeURIComponent(taskId)}/acknowledge" class="inline">${csrfField(ctx)}<input type="hidden" name="back" value="${back}"><button data-action="acknowledge">Acknowledge</button></form>`;
}

function question(w: WaitingTask): Array<{ key: string; text: string; deadline: number }> {
  return Object.entries(w.inputRequests).map(([key, p]) => {
    const params = (p.request.params ?? {}) as { message?: unknown };
    return { key, text: typeof params.message === 'string' ? params.message : p.request.method, deadline: p.deadline };
  });
}

/** A count of the overview, in its state's colour only when there is something to count: "0 failed" is no alarm. */
function countCard(href: string, state: string, n: number, shown: string, label: string): Html {
  return html`<a class="count ${n > 0 ? `s-${state}` : 'zero'}" href="${href}"><span class="n" data-testid="count-${state}">${shown}</span><span class="label">${label}</span></a>`;
}

export function overviewPage(ctx: PageContext, d: {
  counts: OpsCounts;
  unread: OpsTaskRow[];
  waiting: WaitingTask[];
  idle: { queued: IdleTask[]; queueDepth: number; parked: IdleTask[]; moreParked: boolean };
  replicas: ReplicaInfo[];
  leaseMs: number;
  alerts: AlertRecord[];
}): Html {
  const back = ctx.base;
  return html`<h1>Overview</h1>
<section class="counts" aria-label="Tasks by state">${STATUSES.map((s) => countCard(`${ctx.base}/tasks?status=${s}`, s, d.counts.byStatus[s], String(d.counts.byStatus[s]), s.replace('_', ' ')))}
${countCard(`${ctx.base}/tasks?unread=1`, 'unread', d.counts.unreadFailures, `${d.counts.unreadFailures}${d.counts.unreadCapped ? '+' : ''}`, 'failed, unread')}</section>

<section><h2>Failed, unread</h2>
${d.unread.length === 0 ? html`<p class="empty">No failure is waiting to be read.</p>` : dataTable('unread', ['Task', 'Tool', 'Principal', 'Failed', 'Error', ''], d.unread.map((t) => ({
  cells: [taskLink(ctx, t.taskId), t.tool, t.principal, `${ago(ctx.now - t.updatedAt)} ago`, cell(t.errorMessage ?? '', { cls: 'msg' }), ackForm(ctx, t.taskId, back)],
})))}</section>

<section><h2>Waiting for a human</h2>
${d.waiting.length === 0 ? html`<p class="empty">Nothing waits for input.</p>` : dataTable('waiting', ['Task', 'Tool', 'Principal', 'Question', 'Waiting', 'Time left'], d.waiting.flatMap((w) => question(w).map((q) => ({
  cells: [taskLink(ctx, w.taskId), w.tool, w.principal, cell(q.text, { cls: 'msg' }), w.inputSince ? ago(ctx.now - w.inputSince) : '',
    cell(q.deadline > ctx.now ? ago(q.deadline - ctx.now) : 'past the deadline', q.deadline - ctx.now < 60_000 ? { cls: 'urgent' } : {})],
}))))}</section>

<section><h2>Queued for capacity</h2>
${d.idle.queueDepth === 0 ? html`<p class="empty">Nothing waits for a free handler.</p>` : html`<p data-testid="queue-depth">${d.idle.queueDepth} task${d.idle.queueDepth === 1 ? '' : 's'} waiting${d.idle.queueDepth > d.idle.queued.length ? html`; the ${d.idle.queued.length} oldest:` : ':'}</p>
${dataTable('queued', ['Place', 'Task', 'Tool', 'Principal', 'Waiting'], d.idle.queued.map((t, i) => ({ cells: [i + 1, taskLink(ctx, t.taskId), t.tool, t.principal, ago(ctx.now - t.queuedAt)] })))}`}</section>

<section><h2>Parked (no process holds them)</h2>
${d.idle.parked.length === 0 ? html`<p class="empty">No task is parked.</p>` : html`${dataTable('parked', ['Task', 'Tool', 'Principal', 'Waits for', 'Parked', 'Due'], d.idle.parked.map((t) => ({
  cells: [taskLink(ctx, t.taskId), t.tool, t.principal, t.inputKeys.length ? `input ${t.inputKeys.join(', ')}` : 'a durable sleep', t.parkedAt ? `${ago(ctx.now - t.parkedAt)} ago` : '',
    t.queuedAt <= ctx.now ? 'now (a replica resumes it)' : `in ${ago(t.queuedAt - ctx.now)}`],
})))}${d.idle.moreParked ? html`<p class="hint">More are parked; these are the ${d.idle.parked.length} due soonest.</p>` : ''}`}</section>

<section><h2>Replicas</h2>
${d.replicas.length === 0 ? html`<p class="empty">No replica is registered.</p>` : dataTable('replicas', ['Replica', 'Host', 'Pid', 'Up', 'Heartbeat', ''], d.replicas.map((r) => {
  const age = ctx.now - r.heartbeatAt;
  const lost = age > d.leaseMs;
  return { cls: lost ? 'lost' : '', cells: [r.replicaId, r.host.split('/')[0], r.pid, ago(ctx.now - r.startedAt), `${ago(age)} ago`, lost ? html`<span class="status s-failed">lost</span>` : html`<span class="status s-completed">live</span>`] };
}))}
${d.alerts.filter((a) => a.kind === 'replica-lost').slice(0, 5).map((a) => html`<p class="lost-note">Lost: ${String(a.data.replicaId ?? '')} (${ago(ctx.now - a.createdAt)} ago)</p>`)}
</section>

<section><h2>Recent alerts</h2>${alertTargetNote(ctx)}${alertsTable(ctx, d.alerts)}<p><a href="${ctx.base}/alerts">All alerts</a></p></section>`;
}

/** A duration as an operator reads it: ms below a second, then seconds, minutes, hours. */
export function took(ms: number | null): string {
  if (ms === null) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  return ago(ms);
}

/** The windows the tools page offers (query value → ms and words). */
export const TOOL_WINDOWS: Record<string, { ms: number; words: string }> = {
  '15m': { ms: 15 * 60_000, words: '15 minutes' },
  '1h': { ms: 3_600_000, words: 'hour' },
  '24h': { ms: 86_400_000, words: '24 hours' },
};

export function toolsPage(ctx: PageContext, stats: ToolStats, windowKey: string, cap: number): Html {
  const w = TOOL_WINDOWS[windowKey]!;
  return html`<h1>Tools</h1>
<form method="get" action="${ctx.base}/tools" class="filters"><label>Tasks finished in the last <select name="window">${Object.entries(TOOL_WINDOWS).map(([k, v]) => html`<option value="${k}"${k === windowKey ? html` selected` : ''}>${v.words}</option>`)}</select></label> <button>Show</button></form>
<p class="hint">How long each tool's tasks took, from creation to their end (waits for input and in the queue included). Percentiles leave out cancelled tasks. Calls answered inline are not stored, so they are not counted here; the metric <code>outlast.tool.call.duration</code> has them.</p>
${stats.capped ? html`<p class="hint" data-testid="tools-capped">More tasks finished in the last ${w.words} than one read takes: these figures cover the ${cap} most recent, since ${iso(stats.from)}.</p>` : ''}
${stats.tools.length === 0 ? html`<p class="empty">No task finished in the last ${w.words}.</p>` : dataTable('tools', ['Tool', 'Finished', 'Failed', 'Cancelled', 'p50', 'p95', 'Longest'], stats.tools.map((t) => ({
  data: { tool: t.tool },
  cells: [html`<a href="${ctx.base}/tasks?tool=${encodeURIComponent(t.tool)}">${t.tool}</a>`, cell(t.finished, { testid: 'finished' }), cell(t.failed, { testid: 'failed' }), cell(t.cancelled, { testid: 'cancelled' }),
    cell(took(t.p50Ms), { testid: 'p50' }), cell(took(t.p95Ms), { testid: 'p95' }), cell(took(t.maxMs), { testid: 'max' })],
})))}`;
}

export function filterQuery(f: OpsTaskFilter, olderThanMin?: string): string {
  const q = new URLSearchParams();
  if (f.status) q.set('status', f.status);
  if (f.tool) q.set('tool', f.tool);
  if (f.principal) q.set('principal', f.principal);
  if (f.unread) q.set('unread', '1');
  if (olderThanMin) q.set('olderThanMin', olderThanMin);
  return q.toString();
}

function filterFields(f: OpsTaskFilter, olderThanMin: string | undefined): Html {
  return html`<input type="hidden" name="status" value="${f.status ?? ''}"><input type="hidden" name="tool" value="${f.tool ?? ''}">
<input type="hidden" name="principal" value="${f.principal ?? ''}"><input type="hidden" name="unread" value="${f.unread ? '1' : ''}">
<input type="hidden" name="olderThanMin" value="${olderThanMin ?? ''}">`;
}

export function listPage(ctx: PageContext, f: OpsTaskFilter, olderThanMin: string | undefined, rows: OpsTaskRow[], next: string | undefined, notice: string | undefined, scanned?: number): Html {
  const here = `${ctx.base}/tasks?${filterQuery(f, olderThanMin)}`;
  return html`<h1>Tasks</h1>
${notice ? html`<p class="notice" role="status">${notice}</p>` : ''}
<form method="get" action="${ctx.base}/tasks" class="filters">
<label>State <select name="status"><option value="">any</option>${STATUSES.map((s) => html`<option value="${s}"${f.status === s ? html` selected` : ''}>${s}</option>`)}</select></label>
<label>Tool <input name="tool" value="${f.tool ?? ''}"></label>
<label>Principal <input name="principal" value="${f.principal ?? ''}"></label>
<label><input type="checkbox" name="unread" value="1"${f.unread ? html` checked` : ''}> failed, unread</label>
<label>Older than <input name="olderThanMin" size="4" value="${olderThanMin ?? ''}"> min</label>
<button>Filter</button></form>
${ctx.operator.role === 'act' ? html`<details class="bulk"><summary>Act on every task matching this filter</summary>
<form method="post" action="${ctx.base}/bulk" class="inline">${csrfField(ctx)}${filterFields(f, olderThanMin)}<input type="hidden" name="action" value="cancel">
<label>Reason <input name="reason" required maxlength="500"></label><button data-action="bulk-cancel">Cancel unfinished ones</button></form>
<form method="post" action="${ctx.base}/bulk" class="inline">${csrfField(ctx)}${filterFields(f, olderThanMin)}<input type="hidden" name="action" value="acknowledge"><button data-action="bulk-acknowledge">Acknowledge unread failures</button></form>
</details>` : ''}
${rows.length === 0 ? html`<p class="empty">No task matches.</p>` : dataTable('tasks', ['Task', 'State', 'Tool', 'Principal', 'Created', 'Owner', 'Attempt', 'Status or outcome'], rows.map((t) => ({
  data: { task: t.taskId },
  cells: [taskLink(ctx, t.taskId), html`${statusBadge(t.status)}${t.cancelRequestedAt && t.status !== 'cancelled' ? html` <span class="note">cancel asked</span>` : ''}${t.status === 'failed' && t.retrievedAt === null && t.acknowledgedAt === null ? html` <span class="note">unread</span>` : ''}`,
    t.tool, t.principal, cell(`${ago(ctx.now - t.createdAt)} ago`, { title: iso(t.createdAt) }), t.owner ?? '', t.attempts, cell(taskLine(t), { cls: 'msg' })],
})))}
${scanned ? html`<p class="hint">These filters combine, so a page looks through ${scanned} tasks at most; older tasks may still match.</p>` : ''}
${next ? html`<p><a rel="next" href="${here}&after=${next}">Older tasks</a></p>` : ''}`;
}

function json(v: unknown): string {
  return JSON.stringify(v, null, 2);
}

/** A step's row: its identity, state, how often it ran, and its value's size (never the value itself). */
function stepsSection(steps: StepRecord[]): Html {
  if (steps.length === 0) return html``;
  return html`<section><h2>Durable steps</h2>${dataTable('steps', ['Step', 'Kind', 'State', 'Tries', 'Claim', 'Value', 'Started', 'Finished', 'Error'], steps.map((st) => ({
    data: { step: st.key },
    cells: [st.key, `${st.kind}${st.idempotent ? ' (idempotent)' : ''}`, statusBadge(st.state), st.tries, st.epoch, st.result === null ? '' : `${st.bytes} bytes`, iso(st.startedAt), iso(st.finishedAt), cell(st.error?.message ?? '', { cls: 'msg' })],
  })))}</section>`;
}

export function taskPage(ctx: PageContext, t: OpsTaskDetail, events: TaskEvent[], showPayloads: boolean, more: { steps: StepRecord[]; position: number | undefined; output?: OutputTail } = { steps: [], position: undefined }): Html {
  const unfinished = t.status === 'working' || t.status === 'input_required';
  const back = `${ctx.base}/tasks/${encodeURIComponent(t.taskId)}`;
  const err = t.error as { code?: number; message?: string; data?: { reason?: string } } | null;
  return html`<h1>Task <code>${t.taskId}</code> ${statusBadge(t.status)}</h1>
${t.status === 'failed' && err ? html`<section class="error-first" data-testid="error"><h2>Error</h2><p class="msg">${err.message ?? ''}</p>
<p>code ${err.code ?? ''}${err.data?.reason ? html` · reason ${err.data.reason}` : ''}</p></section>` : ''}
<dl class="facts">
${standingFacts(t)}
<dt>Tool</dt><dd>${t.tool}</dd><dt>Principal</dt><dd>${t.principal}</dd><dt>Wire</dt><dd>${t.origin}</dd>
<dt>Owner</dt><dd>${t.owner ?? 'none'}</dd><dt>Attempts</dt><dd>${t.attempts}${t.retrySafe ? ' (safe to re-run)' : ' (not safe to re-run)'}; claim ${t.epoch}</dd>
${t.queuedAt !== null && t.parkedAt === null ? html`<dt>Queued</dt><dd data-testid="queued-since">since ${iso(t.queuedAt)}${more.position ? html`, place ${more.position} in the queue` : ''}</dd>` : ''}
${t.parkedAt !== null ? html`<dt>Parked</dt><dd data-testid="parked-since">since ${iso(t.parkedAt)} (no process holds it)${t.queuedAt !== null ? html`, due ${t.queuedAt <= ctx.now ? 'now' : iso(t.queuedAt)}` : ''}</dd>` : ''}
<dt>Created</dt><dd>${iso(t.createdAt)} (${ago(ctx.now - t.createdAt)} ago)</dd><dt>Updated</dt><dd>${iso(t.updatedAt)}</dd>
<dt>TTL</dt><dd>${t.ttlMs === null ? 'unlimited' : html`${ago(t.ttlMs)}${t.expiresAt ? html`, expires ${iso(t.expiresAt)}` : ''}`}</dd>
<dt>Outcome read by the client</dt><dd>${t.retrievedAt ? iso(t.retrievedAt) : 'no'}</dd>
${t.acknowledgedAt ? html`<dt>Acknowledged</dt><dd>${iso(t.acknowledgedAt)} by ${t.acknowledgedBy ?? ''}</dd>` : ''}
${t.cancelRequestedAt ? html`<dt>Cancel requested</dt><dd>${iso(t.cancelRequestedAt)} by ${t.cancelledBy ? `operator ${t.cancelledBy}` : 'the caller'}${t.cancelReason ? html`: ${t.cancelReason}` : ''}</dd>` : ''}
</dl>
${ctx.operator.role === 'act' ? html`<section class="actions">
${unfinished && !t.cancelRequestedAt ? html`<form method="post" action="${back}/cancel">${csrfField(ctx)}<label>Reason <input name="reason" required maxlength="500" placeholder="why this task must stop"></label> <button data-action="cancel">Cancel task</button></form>` : ''}
${t.status === 'failed' && !t.acknowledgedAt ? ackForm(ctx, t.taskId, back) : ''}
</section>` : ''}
${Object.keys(t.inputRequests).length ? html`<section><h2>Pending input</h2>${dataTable('pending-input', ['Key', 'Kind', 'Question', 'Deadline'], Object.entries(t.inputRequests).map(([k, p]) => ({
  cells: [k, p.request.method, cell(html`${String((p.request.params as { message?: unknown } | undefined)?.message ?? '')}${operatorAnswerForm(ctx, back, k, p.request)}`, { cls: 'msg' }),
    `${iso(p.deadline)} (${p.deadline > ctx.now ? `${ago(p.deadline - ctx.now)} left` : 'passed'})`],
})))}</section>` : ''}
${Object.keys(t.inputResponses).length ? html`<section><h2>Answered input</h2><p>${Object.entries(t.inputResponses).map(([k, a]) => html`<span class="note">${k} at ${iso(a.answeredAt)}</span> `)}</p></section>` : ''}
${stepsSection(more.steps)}
${more.output ? outputSection(more.output, showPayloads) : ''}
<section><h2>History</h2>${events.length === 0 ? html`<p class="empty">No history recorded (history is off, or the task predates it).</p>` : dataTable('history', ['When', 'What', 'Who', 'Detail'], events.map((e) => ({
  // A completion records the status the handler last reported while running: labelled, not read as the outcome.
  cells: [iso(e.at), e.kind.replace('_', ' '), e.actor ?? '', cell(e.kind === 'completed' && e.detail ? `last status: ${e.detail}` : e.detail ?? '', { cls: 'msg' })],
})))}</section>
<section><h2>Arguments and result</h2>${showPayloads
    ? html`<h3>Arguments</h3><pre>${json(t.args)}</pre>${t.result ? html`<h3>Result</h3><pre>${json(t.result)}</pre>` : ''}`
    : html`<p class="empty">Hidden: the server's operator has not turned payloads on (<code>--dashboard-payloads</code>).</p>`}</section>`;
}
