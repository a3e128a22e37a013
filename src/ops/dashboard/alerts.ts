/**
 * The dashboard's alerts: where this server sends them, and each alert with its delivery. An alert whose target this
 * server does not have (no `--alert-webhook`, or a push destination it was not given) says it is not sent and why,
 * instead of looking like a delivery about to happen. A webhook is shown by its origin only: its path or query is
 * often the secret (a chat's incoming-webhook URL).
 */
import type { AlertRecord } from '../../store/types.js';
import { html, type Html } from './html.js';
import { ago, statusBadge, taskLink, type AlertTargets, type PageContext } from './format.js';
import { cell, dataTable } from './table.js';

const OPERATOR_WEBHOOK = 'alerts';

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return 'a URL that does not parse';
  }
}

/** The flag that would give this alert a target. */
function missingFlag(destination: string): string {
  return destination === OPERATOR_WEBHOOK ? '--alert-webhook' : `--push-destination ${destination}=URL`;
}

/** Whether this server can deliver to `destination` (undefined: it cannot know, the dashboard runs alone). */
function hasTarget(t: AlertTargets | undefined, destination: string): boolean | undefined {
  if (!t) return undefined;
  return destination === OPERATOR_WEBHOOK ? !!t.webhook : !!t.push?.includes(destination);
}

/** One line: where operator alerts go from this server (shown above every alerts table). */
export function alertTargetNote(ctx: PageContext): Html {
  const t = ctx.alertTargets;
  if (!t) return html`<p class="hint" data-testid="alert-target">This dashboard runs apart from the servers: each server sends the alerts to its own <code>--alert-webhook</code>, if it has one.</p>`;
  const push = t.push?.length ? html` Callers may also have their tasks' changes pushed to ${t.push.join(', ')}.` : '';
  if (!t.webhook) return html`<p class="hint" data-testid="alert-target">Alerts are recorded here only: this server has no <code>--alert-webhook</code>, so nobody is told. Give it <code>--alert-webhook URL --alert-webhook-secret whsec_…</code> to have them delivered.${push}</p>`;
  return html`<p class="hint" data-testid="alert-target">Alerts go to the webhook at ${originOf(t.webhook)} (<code>--alert-webhook</code>; the rest of its URL is not shown).${push}</p>`;
}

function delivery(ctx: PageContext, a: AlertRecord): Html {
  const tried = html`${a.attempts} attempt${a.attempts === 1 ? '' : 's'}${a.lastStatus !== null ? html` · last HTTP ${a.lastStatus}` : ''}${a.lastError ? html` · ${a.lastError}` : ''}`;
  if (a.state === 'pending' && hasTarget(ctx.alertTargets, a.destination) === false) {
    return html`<span class="status s-unsent">not sent</span> (no ${missingFlag(a.destination)} configured on this server)${a.attempts ? html` · earlier: ${tried}` : ''}`;
  }
  if (a.state === 'pending' && a.attempts === 0) return html`${statusBadge(a.state)} not tried yet`;
  return html`${statusBadge(a.state)} ${tried}`;
}

export function alertsTable(ctx: PageContext, alerts: AlertRecord[]): Html {
  if (alerts.length === 0) return html`<p class="empty">No alerts.</p>`;
  return dataTable('alerts', ['When', 'Kind', 'Task', 'Message', 'To', 'Delivery'], alerts.map((a) => ({
    cells: [`${ago(ctx.now - a.createdAt)} ago`, a.kind, a.taskId ? taskLink(ctx, a.taskId) : '', cell(a.message, { cls: 'msg' }),
      a.destination === OPERATOR_WEBHOOK ? 'operator webhook' : `push: ${a.destination}`, cell(delivery(ctx, a), { testid: 'delivery' })],
  })));
}

export function alertsPage(ctx: PageContext, alerts: AlertRecord[], next: string | undefined): Html {
  return html`<h1>Alerts</h1>${alertTargetNote(ctx)}${alertsTable(ctx, alerts)}${next ? html`<p><a href="${ctx.base}/alerts?after=${next}">Older</a></p>` : ''}`;
}
