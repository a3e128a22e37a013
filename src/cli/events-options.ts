/** The MCP Events flags of `outlast serve`: the wire, the hosts let through the SSRF check, delivery timing, limits. */
import type { EventDeliveryOptions } from '../ops/events/index.js';
import type { EventsWireOptions } from '../server/events/index.js';

export const EVENTS_OPTIONS = {
  events: { type: 'boolean' },
  'events-allow-host': { type: 'string', multiple: true },
  'events-retry-ms': { type: 'string' },
  'events-timeout-ms': { type: 'string' },
  'events-max-subscriptions': { type: 'string' },
} as const;

export const EVENTS_HELP = `MCP Events (see docs/events.md):
  --events                 serve events/list, subscribe, unsubscribe, poll, stream and deliver webhooks
  --events-allow-host HOST let webhook URLs on HOST through the SSRF check (and http://); repeatable, for tests
  --events-retry-ms N      first retry of a failed webhook after N ms, then 4x longer (default 5000; 5 attempts)
  --events-timeout-ms N    one webhook attempt's (and the challenge's) time limit (default 10000)
  --events-max-subscriptions N   live webhook subscriptions per principal (default 100)
`;

type Values = { events?: boolean; 'events-allow-host'?: string[]; 'events-retry-ms'?: string; 'events-timeout-ms'?: string; 'events-max-subscriptions'?: string };

export interface EventsConfig {
  wire: Omit<EventsWireOptions, 'store' | 'bus' | 'recheckMs'>;
  delivery: Omit<EventDeliveryOptions, 'store' | 'replicaId' | 'log'>;
}

/** The events configuration, undefined when off, or a message saying what to write instead. */
export function eventsConfig(values: Values): EventsConfig | undefined | string {
  const hosts = values['events-allow-host'] ?? [];
  if (!values.events) {
    const stray = (['events-allow-host', 'events-retry-ms', 'events-timeout-ms', 'events-max-subscriptions'] as const).find((k) => values[k] !== undefined);
    return stray ? `--${stray} needs --events` : undefined;
  }
  for (const h of hosts) if (!/^[A-Za-z0-9.:-]+$/.test(h)) return `--events-allow-host must be a host name or address (no scheme, port or path), got "${h}"`;
  const int = (k: 'events-retry-ms' | 'events-timeout-ms' | 'events-max-subscriptions', min: number): number | undefined | string => {
    const v = values[k];
    if (v === undefined) return undefined;
    const n = Number(v);
    return Number.isInteger(n) && n >= min ? n : `--${k} must be an integer >= ${min}, got "${v}"`;
  };
  const retry = int('events-retry-ms', 1);
  const timeout = int('events-timeout-ms', 1);
  const max = int('events-max-subscriptions', 1);
  for (const v of [retry, timeout, max]) if (typeof v === 'string') return v;
  const policy = { allowHosts: new Set(hosts.map((h) => h.replace(/^\[|\]$/g, '').toLowerCase())) };
  return {
    wire: { policy, ...(timeout !== undefined ? { challengeTimeoutMs: timeout as number } : {}), ...(max !== undefined ? { maxSubscriptionsPerPrincipal: max as number } : {}) },
    delivery: { policy, ...(retry !== undefined ? { retryBaseMs: retry as number } : {}), ...(timeout !== undefined ? { timeoutMs: timeout as number } : {}) },
  };
}
