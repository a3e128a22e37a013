/** `events/subscribe` and `events/unsubscribe`: webhook subscriptions, bound to an authenticated principal, verified by
 *  a challenge to the callback before anything is stored, limited per principal, and granted for a bounded time. */
import { webhookKey } from '../../protocol/webhook.js';
import type { EventName } from '../../store/events.js';
import { CallbackError, refusedAddress, verifyCallback } from '../../ops/events/index.js';
import { TASK_OUTPUT, parseOutputRequest } from './task-output.js';
import { canonicalJson, subscriptionId } from './canonical.js';
import { isOutput, needPrincipal, parseArgs, parseName, webhookParams, type WireScope } from './params.js';
import { EventErrorCode, EventsError, type Params } from './wire-options.js';

const MAX_TTL = 7 * 86_400_000;
const MIN_TTL = 60_000;

export async function subscribe(scope: WireScope, p: Params, principal: string, authenticated: boolean): Promise<Record<string, unknown>> {
  const { o, store, output } = scope;
  const limit = o.maxSubscriptionsPerPrincipal ?? 100;
  needPrincipal(authenticated, 'events/subscribe');
  // A task's output: bound to the task's principal, its cursor the output's seq (null: from now; "0": from the start).
  const out = isOutput(p) ? await parseOutputRequest(output, p, principal) : undefined;
  const name = out ? TASK_OUTPUT : parseName(p);
  const { canonical, filter } = out ? { canonical: canonicalJson({ taskId: out.taskId }), filter: { taskId: out.taskId, tool: null } } : await parseArgs(store, name as EventName, p, principal);
  const { url, secret } = webhookParams(p, o);
  if (typeof secret !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'delivery.secret must be a whsec_ secret you generated');
  try {
    webhookKey(secret);
  } catch (e) {
    throw new EventsError(EventErrorCode.InvalidParams, `delivery.secret: ${(e as Error).message}`);
  }
  const now = Date.now();
  const ttl = typeof p.ttlMs === 'number' && Number.isFinite(p.ttlMs) && p.ttlMs > 0 ? p.ttlMs : p.ttlMs === null ? MAX_TTL : (o.defaultTtlMs ?? 86_400_000);
  const refreshBefore = now + Math.round(Math.min(MAX_TTL, Math.max(MIN_TTL, ttl)));
  const subId = subscriptionId(principal, url, name, canonical);
  const existing = await store.events.get(subId);
  // Limits before any POST leaves (a refresh at the limit still succeeds).
  if (!existing && (await store.events.live(principal, now)) >= limit) {
    throw new EventsError(EventErrorCode.ResourceExhausted, `You hold ${limit} live subscriptions, the most this server allows; unsubscribe some (or let them expire) first`, { limit: 'subscriptions', max: limit });
  }
  const verified = await store.events.verifiedAt(principal, url);
  const mustVerify = verified === null || now - verified > (o.verificationCacheMs ?? 3_600_000) || (existing && existing.secret !== secret);
  if (mustVerify) {
    try {
      await verifyCallback(url, secret, subId, { policy: o.policy, timeoutMs: o.challengeTimeoutMs ?? 10_000 });
    } catch (e) {
      const reason = e instanceof CallbackError ? e.reason : 'connection_refused';
      if (reason === 'blocked_address') {
        // The caller hears the category only; the address the name resolved to is for the operator's log.
        const category = (e as CallbackError).category ?? 'reserved';
        o.log?.info('events/subscribe refused a callback host', { principal, host: new URL(url).hostname, category, detail: (e as Error).message });
        throw new EventsError(EventErrorCode.InvalidParams, `delivery.url's host resolves to ${refusedAddress(category)}; the operator must allow that host with --events-allow-host`, { reason, category });
      }
      throw new EventsError(EventErrorCode.CallbackEndpointError, `The callback failed verification (${reason}); nothing was stored`, { reason });
    }
  }
  const outputAfter = out ? Math.min(out.after, out.latest) : undefined;
  const stored = await store.events.subscribe({ subId, principal, url, name, args: canonical, taskId: filter.taskId, tool: filter.tool, secret, refreshBefore, now, ...(out ? { outputAfter } : {}) }, limit);
  if (stored === 'limit') throw new EventsError(EventErrorCode.ResourceExhausted, `You hold ${limit} live subscriptions, the most this server allows`, { limit: 'subscriptions', max: limit });
  if (mustVerify) await store.events.markVerified(subId, Date.now());
  const head = await store.events.head();
  const asked = typeof p.cursor === 'string' && /^\d+$/.test(p.cursor) ? Number(p.cursor) : null;
  // Output subscriptions start at their cursor (decision 12 is for the change log); the rest from now.
  const result: Record<string, unknown> = out
    ? { id: subId, refreshBefore: new Date(refreshBefore).toISOString(), cursor: String(outputAfter), truncated: false }
    : { id: subId, refreshBefore: new Date(refreshBefore).toISOString(), cursor: String(head), truncated: asked !== null && asked < head };
  if (existing) result.deliveryStatus = { active: true, ...(existing.lastDeliveryAt ? { lastDeliveryAt: new Date(existing.lastDeliveryAt).toISOString() } : {}), ...(existing.lastError ? { lastError: existing.lastError } : {}) };
  return result;
}

export async function unsubscribe(scope: WireScope, p: Params, principal: string, authenticated: boolean): Promise<Record<string, unknown>> {
  const { store } = scope;
  needPrincipal(authenticated, 'events/unsubscribe');
  const name = isOutput(p) ? TASK_OUTPUT : parseName(p);
  const a = p.arguments ?? {};
  const d = p.delivery as Params | undefined;
  if (typeof d?.url !== 'string') throw new EventsError(EventErrorCode.InvalidParams, 'params.delivery.url is required (the subscription is identified by name, arguments and url)');
  let url: string;
  try {
    url = new URL(d.url).toString();
  } catch {
    throw new EventsError(EventErrorCode.InvalidParams, 'delivery.url is not a valid URL');
  }
  // Idempotent (OpenAI's rule): an unknown key answers {} as well.
  await store.events.unsubscribe({ principal, url, name, args: canonicalJson(a) });
  return {};
}
