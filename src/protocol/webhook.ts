/**
 * Standard Webhooks (1.0) signing with node:crypto: `webhook-id`, `webhook-timestamp` and `webhook-signature`
 * (`v1,` + base64 HMAC-SHA256 of `id.timestamp.body` under the secret's bytes). Receivers verify with any Standard
 * Webhooks library, or with `verifyWebhook` from `outlast/client`.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** The secret's key bytes: `whsec_` followed by base64 of 24 to 64 random bytes. Throws with what to do otherwise. */
export function webhookKey(secret: string): Buffer {
  const b64 = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : '';
  const key = Buffer.from(b64, 'base64');
  if (!b64 || key.length < 24 || key.length > 64 || key.toString('base64').replace(/=+$/, '') !== b64.replace(/=+$/, '')) {
    throw new Error('A webhook secret must be "whsec_" followed by base64 of 24 to 64 random bytes, e.g. whsec_$(head -c 32 /dev/urandom | base64)');
  }
  return key;
}

export function signature(key: Buffer, id: string, timestampSec: number, body: string): string {
  return `v1,${createHmac('sha256', key).update(`${id}.${timestampSec}.${body}`).digest('base64')}`;
}

export function webhookHeaders(key: Buffer, id: string, body: string, now = Date.now()): Record<string, string> {
  const ts = Math.floor(now / 1000);
  return { 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': signature(key, id, ts, body), 'content-type': 'application/json' };
}

/** Verifies a delivery (constant-time, timestamp within `toleranceSec`); returns the parsed body or throws why not. */
export function verifyWebhook(secret: string, body: string, headers: Record<string, string | string[] | undefined> | Headers, toleranceSec = 300, now = Date.now()): unknown {
  const get = (k: string) => {
    const v = headers instanceof Headers ? headers.get(k) : headers[k];
    return Array.isArray(v) ? v[0] : v ?? undefined;
  };
  const id = get('webhook-id');
  const ts = Number(get('webhook-timestamp'));
  const sigs = get('webhook-signature');
  if (!id || !Number.isInteger(ts) || !sigs) throw new Error('Not a Standard Webhooks delivery: webhook-id, webhook-timestamp and webhook-signature are required');
  if (Math.abs(now / 1000 - ts) > toleranceSec) throw new Error('Webhook timestamp outside the tolerance (replayed or the clocks disagree)');
  const expected = Buffer.from(signature(webhookKey(secret), id, ts, body));
  const ok = sigs.split(' ').some((s) => {
    const given = Buffer.from(s);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!ok) throw new Error('Webhook signature does not match');
  return JSON.parse(body);
}
