/** The dashboard's MCP Events page: webhook subscriptions per principal, their delivery state and last failure, and an operator's deactivate. */
import { html, type Html } from './html.js';
import { ago, type PageContext } from './pages.js';
import type { SubscriptionRecord } from '../../store/events.js';

export function subscriptionsPage(ctx: PageContext, rows: SubscriptionRecord[], principal: string | undefined, notice: string | undefined): Html {
  const state = (s: SubscriptionRecord) =>
    s.refreshBefore !== null && s.refreshBefore <= ctx.now ? 'expired' : s.active ? 'active' : s.deactivatedBy ? `deactivated by ${s.deactivatedBy}` : 'suspended after failures';
  return html`<h1>Event subscriptions</h1>
${notice ? html`<p class="notice" role="status">${notice}</p>` : ''}
<form method="get" action="${ctx.base}/subscriptions" class="filters"><label>Principal <input name="principal" value="${principal ?? ''}"></label><button>Filter</button></form>
${rows.length === 0 ? html`<p class="empty">No subscription.</p>` : html`<table data-testid="subscriptions"><thead><tr><th>Subscription</th><th>Principal</th><th>Event</th><th>Arguments</th><th>URL</th><th>State</th><th>Pending</th><th>Last delivery</th><th>Last failure</th><th>Expires</th><th></th></tr></thead><tbody>
${rows.map((s) => html`<tr data-subscription="${s.subId}"><td>${s.subId}</td><td>${s.principal}</td><td>${s.name}</td><td><code>${s.args}</code></td><td>${s.url}</td>
<td data-testid="state">${state(s)}</td><td>${s.pending}</td><td>${s.lastDeliveryAt ? html`${ago(ctx.now - s.lastDeliveryAt)} ago` : 'never'}</td>
<td>${s.lastError ? html`${s.lastError}${s.lastStatus ? ` (HTTP ${s.lastStatus})` : ''}${s.failures ? `, ${s.failures} in a row` : ''}` : ''}</td>
<td>${s.refreshBefore === null ? 'never' : new Date(s.refreshBefore).toISOString()}</td>
<td>${ctx.operator.role === 'act' && s.active ? html`<form method="post" action="${ctx.base}/subscriptions/${encodeURIComponent(s.subId)}/deactivate" class="inline"><input type="hidden" name="_csrf" value="${ctx.csrf}"><button data-action="deactivate">Deactivate</button></form>` : ''}</td></tr>`)}
</tbody></table>`}
<p class="hint">A deactivated subscription delivers nothing until its owner subscribes again (a refresh).</p>`;
}
