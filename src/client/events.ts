/**
 * The subscriber's side of MCP Events webhooks: a CSPRNG `whsec_` secret, subscribe/unsubscribe over a TaskClient's
 * dispatcher, and a receiver for a Node HTTP server that verifies every delivery over its raw bytes (Standard
 * Webhooks), answers the endpoint challenge, drops redeliveries (per subscription and webhook-id) and hands on events
 * and control envelopes (`gap`, `terminated`).
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { verifyWebhook } from '../protocol/webhook.js';
import type { JsonObject } from '../protocol/index.js';
import type { RawDispatcher } from './transport.js';

export const EVENT_TASK_FINISHED = 'outlast.task.finished';

/** A fresh secret: `whsec_` + base64 of 32 random bytes. */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

export interface WebhookSubscription {
  id: string;
  refreshBefore: string | null;
  cursor: string | null;
  name: string;
  arguments: JsonObject;
  url: string;
  secret: string;
}

export interface SubscribeWebhookOptions {
  url: string;
  /** Default: a fresh one (keep it: the receiver needs it). */
  secret?: string;
  /** Default outlast.task.finished. */
  name?: string;
  /** e.g. {taskId} or {tool}; default {} (all your tasks). */
  arguments?: JsonObject;
  ttlMs?: number | null;
}

export async function subscribeWebhook(dispatcher: RawDispatcher, o: SubscribeWebhookOptions): Promise<WebhookSubscription> {
  const secret = o.secret ?? generateWebhookSecret();
  const name = o.name ?? EVENT_TASK_FINISHED;
  const args = o.arguments ?? {};
  const r = await dispatcher.request('events/subscribe', {
    name,
    arguments: args,
    delivery: { mode: 'webhook', url: o.url, secret },
    cursor: null,
    ...(o.ttlMs !== undefined ? { ttlMs: o.ttlMs } : {}),
  });
  return { id: String(r.id), refreshBefore: (r.refreshBefore as string | null) ?? null, cursor: (r.cursor as string | null) ?? null, name, arguments: args, url: o.url, secret };
}

export async function unsubscribeWebhook(dispatcher: RawDispatcher, s: Pick<WebhookSubscription, 'name' | 'arguments' | 'url'>): Promise<void> {
  await dispatcher.request('events/unsubscribe', { name: s.name, arguments: s.arguments, delivery: { mode: 'webhook', url: s.url } });
}

export interface WebhookEvent {
  eventId: string;
  name: string;
  timestamp: string;
  data: JsonObject;
  cursor?: string | null;
  subscriptionId: string | undefined;
}

export interface WebhookReceiverOptions {
  /** The secret(s) deliveries may be signed with (any one verifying is enough: rotation). */
  secret: string | string[];
  onEvent(e: WebhookEvent): void | Promise<void>;
  /** `gap` and `terminated` envelopes, to pass on to whoever consumes the events. */
  onControl?(envelope: JsonObject & { type: string }, subscriptionId: string | undefined): void | Promise<void>;
  /** Largest body accepted. Default 512 KiB (events are at most 256 KiB). */
  maxBodyBytes?: number;
  /** Remembered webhook-ids for dropping redeliveries. Default 10 000. */
  dedupeSize?: number;
}

/** A node:http handler for a webhook endpoint: verify, challenge, dedupe, hand on; 2xx only once handled. */
export function webhookReceiver(o: WebhookReceiverOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const secrets = Array.isArray(o.secret) ? o.secret : [o.secret];
  const max = o.maxBodyBytes ?? 512 * 1024;
  const seen = new Set<string>();
  return (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= max) chunks.push(c);
    });
    req.on('end', () => {
      void (async () => {
        if (req.method !== 'POST') return res.writeHead(405).end();
        if (size > max) return res.writeHead(413).end();
        const raw = Buffer.concat(chunks).toString('utf8');
        let body: JsonObject | undefined;
        for (const s of secrets) {
          try {
            body = verifyWebhook(s, raw, req.headers) as JsonObject;
            break;
          } catch {
            /* try the next secret */
          }
        }
        if (!body) return res.writeHead(401, { 'content-type': 'text/plain' }).end('signature does not verify\n');
        const subId = req.headers['x-mcp-subscription-id'] as string | undefined;
        if (body.type === 'verification') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ challenge: body.challenge }));
        const key = `${subId ?? ''} ${req.headers['webhook-id']}`;
        if (seen.has(key)) return res.writeHead(200).end();
        try {
          if (typeof body.type === 'string') await o.onControl?.(body as JsonObject & { type: string }, subId);
          else await o.onEvent({ ...(body as unknown as Omit<WebhookEvent, 'subscriptionId'>), subscriptionId: subId });
        } catch {
          return res.writeHead(503).end(); // not handled: the sender retries
        }
        seen.add(key);
        if (seen.size > (o.dedupeSize ?? 10_000)) seen.delete(seen.values().next().value!);
        res.writeHead(200).end();
      })();
    });
  };
}
