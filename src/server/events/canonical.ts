/** Subscription identity: arguments compared in canonical JSON, and the id derived from who, where and what. */
import { createHash } from 'node:crypto';

/** Canonical JSON (sorted keys), the form arguments are compared in. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  return JSON.stringify(v);
}

/** The derived subscription id: deterministic over (principal, url, name, canonical arguments); a handle, never input. */
export function subscriptionId(principal: string, url: string, name: string, args: string): string {
  return `sub_${createHash('sha256').update(JSON.stringify([principal, url, name, args])).digest('hex').slice(0, 32)}`;
}
