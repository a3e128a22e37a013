/**
 * `outlast dashboard --store URL`: the dashboard alone, against a store (no tools, no handlers). Cancels it records
 * reach the replica running the task through the store's signal bus (PostgreSQL), or within that replica's next
 * heartbeat (SQLite, another process).
 */
import type { AddressInfo } from 'node:net';
import { localhostHostValidation } from '@modelcontextprotocol/node';
import { checkDashboardExposure, createDashboard, isLoopbackHost } from '../ops/dashboard/index.js';
import { LocalSignalBus, type SignalBus } from '../store/local-bus.js';
import { cliLogger } from './logger.js';
import { OPS_OPTIONS, opsConfig } from './ops-options.js';
import { busFromUrl, storeFromUrl } from './store-url.js';
import { createLimitedServer } from '../server/http-limits.js';
import { parseCommand } from './usage.js';
import { SECRET_FILE_OPTIONS, resolveSecrets } from './secret-options.js';

export const DASHBOARD_HELP = `The dashboard alone, against a store:
  outlast dashboard --store URL [--bus URL] [--port N] [--host H] [--lease-ms N] [--operator-file PATH]
                    [--operator-readonly-file PATH] [--dashboard-payloads] [--dashboard-title T]
                    [--public-url URL] [--dashboard-session-ms N] [--dashboard-idle-ms N]
  --bus URL: the replicas' --bus (postgres://…, redis://…, none), when the store goes through a pooler
  --operator-file PATH / --operator-readonly-file PATH: operators, one TOKEN=NAME a line (or $OUTLAST_OPERATOR,
  $OUTLAST_OPERATOR_READONLY; --operator TOKEN=NAME and --operator-readonly TOKEN=NAME work too, readable by every
  local user in ps)
  --public-url URL: where people reach it (https: the sign-in cookie is Secure, also behind a TLS proxy)
  --dashboard-session-ms N / --dashboard-idle-ms N: a sign-in's lifetime (default 12 h) and idle timeout (default 1 h)
`;

const DASHBOARD_OPTIONS = {
  store: { type: 'string' },
  bus: { type: 'string' },
  port: { type: 'string' },
  host: { type: 'string' },
  'lease-ms': { type: 'string' },
  'log-level': { type: 'string' },
  operator: OPS_OPTIONS.operator,
  'operator-readonly': OPS_OPTIONS['operator-readonly'],
  'operator-file': SECRET_FILE_OPTIONS['operator-file'],
  'operator-readonly-file': SECRET_FILE_OPTIONS['operator-readonly-file'],
  'dashboard-payloads': OPS_OPTIONS['dashboard-payloads'],
  'dashboard-title': OPS_OPTIONS['dashboard-title'],
  'dashboard-session-ms': OPS_OPTIONS['dashboard-session-ms'],
  'dashboard-idle-ms': OPS_OPTIONS['dashboard-idle-ms'],
  'public-url': OPS_OPTIONS['public-url'],
  'log-format': OPS_OPTIONS['log-format'],
} as const;

/** The flags of `outlast dashboard` (throws HelpRequested / UsageError, see usage.ts). */
export function dashboardArgs(argv: string[]): Record<string, unknown> {
  return parseCommand('dashboard', argv, DASHBOARD_OPTIONS, 0).values;
}

export async function dashboardCommand(given: Record<string, unknown>, fail: (m: string) => never): Promise<void> {
  if (typeof given.store !== 'string') fail('dashboard needs --store URL (the store the replicas use)');
  const secrets = resolveSecrets(given, DASHBOARD_OPTIONS);
  if (typeof secrets === 'string') fail(secrets);
  const values = secrets.values;
  const ops = opsConfig({ ...(values as object), dashboard: true });
  if (typeof ops === 'string') fail(ops);
  const log = cliLogger(String(values['log-level'] ?? 'info'), ops.logFormat);
  if (typeof log === 'string') fail(log);
  for (const w of secrets.warnings) log.warn(w);
  if (secrets.sources.length) log.info(`secrets: ${secrets.sources.join('; ')}`);
  const port = values.port === undefined ? 3001 : Number(values.port);
  const leaseMs = values['lease-ms'] === undefined ? undefined : Number(values['lease-ms']);
  if (!Number.isInteger(port) || port < 0) fail('--port must be an integer >= 0');
  if (leaseMs !== undefined && (!Number.isInteger(leaseMs) || leaseMs < 1)) fail('--lease-ms must be a positive integer');
  const host = String(values.host ?? '127.0.0.1');
  try {
    checkDashboardExposure(host, ops.tokens);
  } catch (e) {
    fail((e as Error).message);
  }
  const store = storeFromUrl(String(values.store), fail);
  // With PostgreSQL the page hears every replica's signals, and its cancels reach them at once (on --bus when the
  // replicas have one).
  const onError = (m: string) => log.warn(m);
  const bus: SignalBus =
    typeof values.bus === 'string' ? busFromUrl(values.bus, store, onError, fail) : (store.createSignalBus?.({ onError }) ?? new LocalSignalBus());
  try {
    await bus.start?.();
    await store.init();
  } catch (e) {
    fail((e as Error).message);
  }
  const d = createDashboard({ ...ops.tokens, ...ops.session, store, bus, host, showPayloads: ops.showPayloads, ...(ops.title ? { title: ops.title } : {}), ...(leaseMs ? { leaseMs } : {}), log: (m, x) => log.info(m, x) });
  const hostCheck = isLoopbackHost(host) ? localhostHostValidation() : undefined;
  // The front's default header, request and keep-alive timeouts and connection cap (the live stream is not cut).
  const server = createLimitedServer({}, (req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (hostCheck && !hostCheck(req, res)) return;
    if (d.owns(path)) return void d.handle(req, res);
    res.writeHead(path === '/' ? 302 : 404, { location: d.basePath, 'content-type': 'text/plain' }).end(path === '/' ? '' : `Not found: the dashboard is at ${d.basePath}\n`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const shown = host.includes(':') ? `[${host}]` : host;
  const url = `http://${shown}:${(server.address() as AddressInfo).port}${d.basePath}`;
  log.announce(`outlast dashboard on ${url}`, { url });
  const stop = async () => {
    d.close();
    server.close();
    server.closeAllConnections?.();
    await bus.close();
    await store.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop());
  process.on('SIGINT', () => void stop());
}
