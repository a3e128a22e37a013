/**
 * The operations flags shared by `outlast serve` and `outlast dashboard`: operator tokens, the dashboard, metrics,
 * alert webhooks and push destinations. Each bad value is refused with what to write instead.
 */
import type { DashboardOptions } from '../ops/dashboard/index.js';
import type { AlertOptions, WebhookDestination } from '../ops/alerts/index.js';
import { webhookKey } from '../protocol/webhook.js';

export const OPS_OPTIONS = {
  dashboard: { type: 'boolean' },
  operator: { type: 'string', multiple: true },
  'operator-readonly': { type: 'string', multiple: true },
  'dashboard-payloads': { type: 'boolean' },
  'dashboard-title': { type: 'string' },
  'dashboard-session-ms': { type: 'string' },
  'dashboard-idle-ms': { type: 'string' },
  metrics: { type: 'boolean' },
  'alert-webhook': { type: 'string' },
  'alert-webhook-secret': { type: 'string' },
  'alert-unread-after-ms': { type: 'string' },
  'alert-retry-ms': { type: 'string' },
  'alert-timeout-ms': { type: 'string' },
  'push-destination': { type: 'string', multiple: true },
  'push-secret': { type: 'string' },
  'public-url': { type: 'string' },
  'no-answer-pages': { type: 'boolean' },
  'log-format': { type: 'string' },
} as const;

export const OPS_HELP = `Operations (see docs/operations.md):
  --dashboard              the dashboard at /dashboard (loopback only unless operator tokens are given)
  --operator TOKEN=NAME    an operator who may act (cancel, acknowledge); repeatable; prefer --operator-file
                           PATH or $OUTLAST_OPERATOR (a flag's value is readable by every local user)
  --operator-readonly TOKEN=NAME   an operator who may only look; repeatable; prefer --operator-readonly-file
                           PATH or $OUTLAST_OPERATOR_READONLY
  --dashboard-payloads     show task arguments and results on task pages
  --dashboard-title T      an environment badge in the dashboard's header
  --dashboard-session-ms N a browser's sign-in lasts at most N ms however it is used (default 43200000, 12 h)
  --dashboard-idle-ms N    a browser's sign-in not used for N ms ends (default 3600000, 1 h)
  --metrics                Prometheus text at /metrics (OpenTelemetry SDK + Prometheus exporter), for operators:
                           with operator tokens a scrape sends one as a bearer token; without any, loopback only
  --metrics-listen HOST:PORT   serve /metrics on a listener of its own instead, without credentials, for a
                           Prometheus on a private interface (not a wildcard address such as 0.0.0.0)
  --alert-webhook URL      deliver alerts as Standard Webhooks to URL (needs the whsec_… secret in
                           $OUTLAST_ALERT_WEBHOOK_SECRET, or --alert-webhook-secret whsec_…)
  --alert-unread-after-ms N   a failure nobody read for N ms alerts (default 900000)
  --alert-retry-ms N       first retry of a failed delivery after N ms, then 4x longer each time (default 5000)
  --alert-timeout-ms N     one delivery attempt's time limit (default 15000)
  --push-destination NAME=URL  a destination callers may name in _meta["outlast/push"] (signed with the whsec_…
                           secret in $OUTLAST_PUSH_SECRET, or --push-secret whsec_…)
  --public-url URL         this deployment's address, for dashboard links in alerts and answer-page links (with
                           https, the dashboard's and answer pages' cookies are Secure, also behind a TLS proxy)
  --no-answer-pages        no answer pages (/answer/…) for questions of clients without task support
                           (default: on with handles, once --public-url is set)
  --log-format F           text | json (one JSON object per line)
`;

type Values = { [K in keyof typeof OPS_OPTIONS]?: (typeof OPS_OPTIONS)[K] extends { multiple: true } ? string[] : (typeof OPS_OPTIONS)[K]['type'] extends 'boolean' ? boolean : string };

function pairs(list: string[] | undefined, flag: string, what: string): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const p of list ?? []) {
    const i = p.indexOf('=');
    if (i <= 0 || i === p.length - 1) return `--${flag} must be ${what}, got "${p}"`;
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}

function int(v: string | undefined, flag: string, min: number): number | undefined | string {
  if (v === undefined) return undefined;
  const n = Number(v);
  return Number.isInteger(n) && n >= min ? n : `--${flag} must be an integer >= ${min}, got "${v}"`;
}

export interface OpsConfig {
  tokens: Pick<DashboardOptions, 'operators' | 'readonly'>;
  /** The dashboard's sign-in: lifetime, idle timeout, and the public URL (Secure cookie, accepted origin). */
  session: Pick<DashboardOptions, 'sessionMs' | 'sessionIdleMs' | 'publicUrl'>;
  dashboard: boolean;
  showPayloads: boolean;
  title: string | undefined;
  metrics: boolean;
  alerts: Omit<AlertOptions, 'store' | 'replicaId' | 'log'>;
  pushDestinations: string[];
  /** --public-url: links in alerts and on answer pages are built on it. */
  publicUrl: string | undefined;
  /** Anything asks for the alert service (scans and deliveries). */
  alertsOn: boolean;
  logFormat: string;
}

/** The operations flags, checked; a string is the usage error to print. */
export function opsConfig(values: Values): OpsConfig | string {
  const operators = pairs(values.operator, 'operator', 'TOKEN=NAME');
  if (typeof operators === 'string') return operators;
  const readonly = pairs(values['operator-readonly'], 'operator-readonly', 'TOKEN=NAME');
  if (typeof readonly === 'string') return readonly;
  for (const t of [...Object.keys(operators), ...Object.keys(readonly)]) if (t.length < 8) return 'an operator token must have at least 8 characters';
  const push = pairs(values['push-destination'], 'push-destination', 'NAME=URL');
  if (typeof push === 'string') return push;
  const unreadAfterMs = int(values['alert-unread-after-ms'], 'alert-unread-after-ms', 1);
  const retryBaseMs = int(values['alert-retry-ms'], 'alert-retry-ms', 1);
  const timeoutMs = int(values['alert-timeout-ms'], 'alert-timeout-ms', 100);
  const sessionMs = int(values['dashboard-session-ms'], 'dashboard-session-ms', 1000);
  const sessionIdleMs = int(values['dashboard-idle-ms'], 'dashboard-idle-ms', 1000);
  for (const v of [unreadAfterMs, retryBaseMs, timeoutMs, sessionMs, sessionIdleMs]) if (typeof v === 'string') return v;
  const secretOk = (s: string | undefined, flag: string, env: string) => {
    if (!s) return `its secret is required: $${env} (or ${flag} whsec_…)`;
    try {
      webhookKey(s);
      return undefined;
    } catch (e) {
      return `${flag}: ${(e as Error).message}`;
    }
  };
  let webhook: WebhookDestination | undefined;
  if (values['alert-webhook']) {
    const bad = secretOk(values['alert-webhook-secret'], '--alert-webhook-secret', 'OUTLAST_ALERT_WEBHOOK_SECRET');
    if (bad) return `--alert-webhook: ${bad}`;
    webhook = { url: values['alert-webhook'], secret: values['alert-webhook-secret']! };
  } else if (values['alert-webhook-secret']) return '--alert-webhook-secret needs --alert-webhook URL';
  const pushDestinations: Record<string, WebhookDestination> = {};
  if (Object.keys(push).length) {
    const bad = secretOk(values['push-secret'], '--push-secret', 'OUTLAST_PUSH_SECRET');
    if (bad) return `--push-destination: ${bad}`;
    for (const [name, url] of Object.entries(push)) pushDestinations[name] = { url, secret: values['push-secret']! };
  }
  const publicUrl = values['public-url'];
  if (publicUrl !== undefined && !/^https?:\/\/[^\s/]+/.test(publicUrl)) return `--public-url must be an http(s) URL such as https://mcp.example.com, got ${JSON.stringify(publicUrl)}`;
  return {
    tokens: { operators, readonly },
    session: {
      ...(sessionMs !== undefined ? { sessionMs: sessionMs as number } : {}),
      ...(sessionIdleMs !== undefined ? { sessionIdleMs: sessionIdleMs as number } : {}),
      ...(publicUrl ? { publicUrl } : {}),
    },
    dashboard: !!values.dashboard,
    showPayloads: !!values['dashboard-payloads'],
    title: values['dashboard-title'],
    metrics: !!values.metrics,
    alerts: {
      ...(webhook ? { webhook } : {}),
      pushDestinations,
      ...(unreadAfterMs !== undefined ? { unreadAfterMs: unreadAfterMs as number } : {}),
      ...(retryBaseMs !== undefined ? { retryBaseMs: retryBaseMs as number } : {}),
      ...(timeoutMs !== undefined ? { timeoutMs: timeoutMs as number } : {}),
      ...(publicUrl ? { dashboardUrl: `${publicUrl.replace(/\/$/, '')}/dashboard` } : {}),
    },
    pushDestinations: Object.keys(pushDestinations),
    publicUrl,
    alertsOn: !!values.dashboard || !!webhook || Object.keys(pushDestinations).length > 0 || unreadAfterMs !== undefined,
    logFormat: values['log-format'] ?? 'text',
  };
}
