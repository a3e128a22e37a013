/** The dashboard's MCP Events page: webhook subscriptions per principal, their delivery state and last failure, and an operator's deactivate. */
import { html, type Html } from './html.js';
import { ago, csrfField, type PageContext } from './format.js';
import { cell, dataTable } from './table.js';
import type { SubscriptionRecord } from '../../store/events.js';

export function subscriptionsPage(ctx: PageContext, rows: SubscriptionRecord[], principal: string | undefined, notice: string | undefined): Html {
  const state = (s: SubscriptionRecord) =>
    s.refreshBefore !== null && s.refreshBefore <= ctx.now ? 'expired' : s.active ? 'active' : s.deactivatedBy ? `deactivated by ${s.deactivatedBy}` : 'suspended after failures';
  return html`<h1>Event subscriptions</h1>
${notice ? html`<p class="notice" role="status">${notice}</p>` : ''}
<form method="get" action="${ctx.base}/subscriptions" class="filters"><label>Principal <input name="principal" value="${principal ?? ''}"></label><button>Filter</button></form>
${rows.length === 0 ? html`<p class="empty">No subscription.</p>` : dataTable('subscriptions', ['Subscription', 'Principal', 'Event', 'Arguments', 'URL', 'State', 'Pending', 'Last delivery', 'Last failure', 'Expires', ''], rows.map((s) => ({
  data: { subscription: s.subId },
  cells: [s.subId, s.principal, s.name, html`<code>${s.args}</code>`, s.url, cell(state(s), { testid: 'state' }), s.pending, s.lastDeliveryAt ? html`${ago(ctx.now - s.lastDeliveryAt)} ago` : 'never',
    s.lastError ? html`${s.lastError}${s.lastStatus ? ` (HTTP ${s.lastStatus})` : ''}${s.failures ? `, ${s.failures} in a row` : ''}` : '',
    s.refreshBefore === null ? 'never' : new Date(s.refreshBefore).toISOString(),
    ctx.operator.role === 'act' && s.active ? html`<form method="post" action="${ctx.base}/subscriptions/${encodeURIComponent(s.subId)}/deactivate" class="inline">${csrfField(ctx)}<button data-action="deactivate">Deactivate</button></form>` : ''],
})))}
<p class="hint">A deactivated subscription delivers nothing until its owner subscribes again (a refresh).</p>`;
}
