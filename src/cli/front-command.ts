/**
 * What `outlast serve` and `outlast gateway` share: the front's flags (store, bus, auth, handles, answer pages, events,
 * the dashboard, metrics, bounds) turned into an Outlast's options, and the serving of the Outlast a command mounts
 * with them (HTTP, stdio or a worker), with its shutdown. serve mounts a module; gateway mounts an upstream server.
 */
import type { Implementation } from '@modelcontextprotocol/server';
import { serveHttp, type RunningHttpServer } from '../server/http.js';
import { DEFAULT_HTTP_LIMITS, type HttpLimits } from '../server/http-limits.js';
import { serveOutlastStdio } from '../server/stdio/stdio.js';
import { createOAuthResourceServer, type OAuthFrontOptions } from '../server/oauth/index.js';
import type { LoadServerModuleOptions } from '../server/module/load-module.js';
import type { Outlast } from '../server/outlast.js';
import type { ServerFactory } from '../server/http.js';
import { busFromUrl, storeFromUrl } from './store-url.js';
import type { SignalBus, TaskStore } from '../store/index.js';
import { cliLogger, type CliLogger } from './logger.js';
import { OPS_HELP, OPS_OPTIONS, opsConfig, type OpsConfig } from './ops-options.js';
import { EVENTS_HELP, EVENTS_OPTIONS, eventsConfig, type EventsConfig } from './events-options.js';
import { SECRET_FILE_OPTIONS, SECRET_HELP, resolveSecrets } from './secret-options.js';
import { EventDelivery } from '../ops/events/index.js';
import { checkDashboardExposure } from '../ops/dashboard/index.js';
import { anonymousNetwork } from '../server/anonymous-network.js';
import { AlertService } from '../ops/alerts/index.js';
import { observeTaskCounts } from '../ops/metrics.js';
import { METRICS_LISTEN_OPTION, metricsServing, type MetricsServing } from './metrics-serving.js';

/** The drain on SIGTERM: fits Kubernetes' default grace period (30 s) before its SIGKILL, with room to exit. */
export const DEFAULT_DRAIN_MS = 25_000;

/** What a command mounts on the front: its Outlast (tools defined, not started) and per-request factory. */
export interface MountedFront {
  outlast: Outlast;
  factory: ServerFactory;
  /** The identity server/discover reports; without it task polls go through `factory` (no direct path). */
  info?: Implementation;
  /** What the ready lines name (a module's name, an upstream). */
  describe: string;
  /** Called last on shutdown, after the runtime stopped (e.g. ends upstream processes). */
  close?(): Promise<void>;
}

/** What the front's flags give the mount: the Outlast's options (store made, handles as the flags say), and the log. */
export type MountOptions = LoadServerModuleOptions & { log: CliLogger };
export type Mount = (options: MountOptions) => Promise<MountedFront>;
export type FrontValues = Record<string, any>;

export const FRONT_HELP = `  --port N                 HTTP port (default 3000, or $PORT; 0 picks a free one)
  --host H                 interface to bind (default 127.0.0.1)
  --store URL              sqlite:PATH (default sqlite:.outlast/tasks.db), or
                           postgres://USER@HOST:PORT/DB?schema=NAME&pool=N for several replicas
                           (deadlines: &connect_timeout_ms=&query_timeout_ms=&statement_timeout_ms=
                           &keepalive_ms=&signal_ping_ms=, see docs/faults-store.md;
                           &prepared_statements=on|off|auto, auto: named ones only on a direct connection)
  --bus URL                where signals between replicas of a postgres store go (cancel, answers, listen
                           streams, queue wakes): postgres://… (a direct or session-mode URL, for LISTEN/NOTIFY
                           only), redis://HOST:PORT (Redis or Valkey pub/sub), or none (each replica re-reads; the
                           delays are logged). Default: the store's own connection, which a transaction-mode pooler
                           cannot carry (the replica then refuses to start); see docs/deployment.md
  --default-ttl-ms N       task retention from creation, ms (default 86400000)
  --bearer TOKEN=PRINCIPAL accept this static bearer token as PRINCIPAL (repeatable); others get 401. On the
                           command line every local user can read it: prefer --bearer-file PATH or
                           $OUTLAST_BEARER_TOKENS (see Secrets below)
  --oauth-issuer URL       an OAuth resource server: accept access tokens of this authorization server
                           (repeatable); tasks are bound to the token's issuer + subject (see docs/oauth.md)
  --oauth-resource URL     this server's resource identifier: the audience every token must carry
  --oauth-scopes a,b       scopes every request needs
  --oauth-principal-claim NAME  the claim naming the person (default sub)
  --oauth-allow-http       accept an http:// issuer on a loopback address (tests only)
  --oauth-introspection-client-id ID  introspect opaque tokens (RFC 7662) as this client; its secret in
                           $OUTLAST_OAUTH_INTROSPECTION_SECRET
  --oauth-sign-in-client-id ID  the answer page signs people in as this client (redirect URI
                           <public URL>/answer/signed-in; a secret, if any, in $OUTLAST_OAUTH_SIGN_IN_CLIENT_SECRET);
                           without it the page registers itself where the issuer allows (RFC 7591)
  --oauth-jwks-cooldown-ms N  least time between two JWKS fetches of an issuer (default 30000)
  --oauth-token-cache-ms N    a verified JWT is remembered this long, capped by its exp (default 60000;
                           0 checks the signature on every request)
  --allow-anonymous-network  serve a --host other than loopback without --bearer or --oauth-issuer (refused
                           otherwise): every caller is anonymous; only for a network you trust (logged as a warning)
  --inline-budget-ms N     how long an auto call may run before it becomes a task (default 1000)
  --concurrency N          running handlers above which auto calls become tasks at once (default 64)
  --max-running N          handlers running at once on this replica; calls over it wait in the run queue as
                           tasks (or are refused with a retry time if they cannot be tasks) (default: no limit)
  --tool-limit TOOL=N      at most N handlers of TOOL at once across every replica on the store (repeatable;
                           give every replica the same); such a tool always runs as a task
  --max-queued N           tasks waiting in the run queue (whole deployment) past which new calls are refused
                           with a retry time, nothing stored (default 10000)
  --max-running-per-principal N  handlers of one caller running at once on this replica; past it its calls
                           wait in the queue or are refused (default 3/4 of --max-running, all of it below 8;
                           256 when --max-running is unlimited)
  --max-queued-per-principal N   tasks of one caller waiting in the run queue (whole deployment) past which its
                           calls are refused, nothing stored (default a quarter of --max-queued, all below 100)
  --max-tasks-per-principal N    stored tasks of one caller past which its calls that may become tasks are
                           refused until one expires (default 100000)
  --queue-poll-ms N        period of the claim attempt that covers lost queue signals; on SQLite, how soon other
                           processes on the file see queued work (default 1000)
  --no-http                a worker replica: runs queued work (and recovery, sweeping), serves nothing
  --poll-interval-ms N     base pollIntervalMs advertised (default 500)
  --input-timeout-ms N     default deadline for input requests (default 900000)
  --park-after-ms N        a durable tool's wait (input, sleep) is parked after this long: no process holds it,
                           any replica resumes it when due (default 2000; 0 parks at once)
  --max-result-bytes N     largest task result (JSON bytes); a larger one fails the task (default 1048576)
  --max-output-per-task N  output items kept per task (ctx.output); past it the oldest are dropped and older
                           stream cursors get events_gone (default 10000)
  --max-output-bytes-per-task B
                           output bytes kept per task, dropping the oldest past it (default 16777216)
  --sweep-interval-ms N    sweeper period (default 30000)
  --heartbeat-ms N         heartbeat / orphan check period (default 5000)
  --lease-ms N             a replica silent this long is dead and its tasks are taken over
                           (default 30000; at least twice --heartbeat-ms; given alone, the heartbeat is a sixth
                           of it, at most 5000)
  --drain-ms N             on SIGTERM, how long tasks not safe to re-run may finish; retry-safe and durable
                           ones go to the other replicas at once; a second signal ends it (default 25000)
  --max-body-bytes N       largest request body (default 1048576); a body nested deeper than 128 levels is
                           refused with -32602
  --max-streams-per-principal N  streams one caller may hold open on this replica (subscriptions/listen,
                           tasks/stream, events/stream); past it -31503 principal_streams (default 16)
  --headers-timeout-ms N   a request's headers must arrive within N ms, else 408 and the socket closes (default 15000)
  --request-timeout-ms N   a whole request (headers and body) must arrive within N ms (default 30000); answers that
                           stream (listen, tasks/stream, events/stream, a held call) are not cut by it
  --keep-alive-timeout-ms N  an idle kept-alive connection closes after N ms (default 65000; behind a load
                           balancer, longer than its idle timeout)
  --max-connections N      open connections past which a new one is closed at once (default 10000)
  --no-poll-limit          do not refuse over-polling
  --handles / --no-handles follow long calls of clients without task support through a handle and plain
                           status/cancel tools (default: what the module says)
  --handle-after-ms N      how long such a call runs before it is answered with a handle (default 20000)
  --no-direct-task-methods serve tasks/get|update|cancel through the SDK's per-request McpServer
                           (default: answered by the HTTP front from the store, same checks and answers)
  --trace-polls            a server span for every tasks/get too (when an OpenTelemetry SDK is registered)
  --log-level L            debug | info | warn | error (default info)

${SECRET_HELP}${OPS_HELP}${EVENTS_HELP}`;

export const FRONT_OPTIONS = {
  port: { type: 'string' },
  host: { type: 'string' },
  store: { type: 'string' },
  bus: { type: 'string' },
  'default-ttl-ms': { type: 'string' },
  bearer: { type: 'string', multiple: true },
  ...SECRET_FILE_OPTIONS,
  'oauth-issuer': { type: 'string', multiple: true },
  'oauth-resource': { type: 'string' },
  'oauth-scopes': { type: 'string' },
  'oauth-principal-claim': { type: 'string' },
  'oauth-allow-http': { type: 'boolean' },
  'oauth-introspection-client-id': { type: 'string' },
  'oauth-sign-in-client-id': { type: 'string' },
  'oauth-jwks-cooldown-ms': { type: 'string' },
  'oauth-token-cache-ms': { type: 'string' },
  'allow-anonymous-network': { type: 'boolean' },
  'inline-budget-ms': { type: 'string' },
  concurrency: { type: 'string' },
  'max-running': { type: 'string' },
  'tool-limit': { type: 'string', multiple: true },
  'max-queued': { type: 'string' },
  'max-running-per-principal': { type: 'string' },
  'max-queued-per-principal': { type: 'string' },
  'max-tasks-per-principal': { type: 'string' },
  'queue-poll-ms': { type: 'string' },
  'no-http': { type: 'boolean' },
  'poll-interval-ms': { type: 'string' },
  'input-timeout-ms': { type: 'string' },
  'park-after-ms': { type: 'string' },
  'max-result-bytes': { type: 'string' },
  'max-output-per-task': { type: 'string' },
  'max-output-bytes-per-task': { type: 'string' },
  'sweep-interval-ms': { type: 'string' },
  'heartbeat-ms': { type: 'string' },
  'lease-ms': { type: 'string' },
  'drain-ms': { type: 'string' },
  'max-body-bytes': { type: 'string' },
  'no-poll-limit': { type: 'boolean' },
  handles: { type: 'boolean' },
  'no-handles': { type: 'boolean' },
  'handle-after-ms': { type: 'string' },
  'no-direct-task-methods': { type: 'boolean' },
  'trace-polls': { type: 'boolean' },
  'log-level': { type: 'string' },
  'max-streams-per-principal': { type: 'string' },
  'headers-timeout-ms': { type: 'string' },
  'request-timeout-ms': { type: 'string' },
  'keep-alive-timeout-ms': { type: 'string' },
  'max-connections': { type: 'string' },
  ...OPS_OPTIONS,
  ...METRICS_LISTEN_OPTION,
  ...EVENTS_OPTIONS,
} as const;


export function intFlagOf(values: Record<string, unknown>, name: string, fail: (message: string) => never, min = 0): number | undefined {
  const v = values[name];
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer >= ${min}, got "${String(v)}"`);
  return n;
}

type Fail = (message: string) => never;

/** A front's flags, read and checked: what the later steps take. Read in one order, so that of two wrong flags the
 *  same one is named first, and the SDK's meter provider is registered before the runtime creates its instruments. */
interface FrontSetup {
  values: FrontValues;
  log: CliLogger;
  fail: Fail;
  intFlag(name: string, min?: number): number | undefined;
  ops: OpsConfig;
  events: EventsConfig | undefined;
  host: string;
  httpLimits: Partial<HttpLimits>;
  metrics: MetricsServing | undefined;
  bearer: Record<string, string>;
  oauth: OAuthFrontOptions | undefined;
  allowAnonymousNetwork: boolean;
  toolLimits: Record<string, number>;
  ttl: number | undefined;
  handles: MountOptions['handles'];
  leaseMs: number | undefined;
  store: TaskStore;
  bus: SignalBus | undefined;
}

/** What runs beside the front (alert scans, event delivery), and what serves (set once it does), for the stop. */
interface FrontParts {
  mounted: MountedFront;
  alerts: AlertService | undefined;
  delivery: EventDelivery | undefined;
  http?: RunningHttpServer;
  stdio?: { close(): Promise<void> };
}

/**
 * Serves a front (`outlast serve`, `outlast gateway`): its flags read, the command's Outlast mounted, what runs beside
 * it made, stop signals taken, then it serves the way the flags say (a worker, stdio, or HTTP).
 */
export async function runFront(given: FrontValues, mount: Mount, fail: Fail): Promise<void> {
  const setup = await readFront(given, fail);
  const parts = await mountFront(setup, mount);
  onStopSignals(setup, parts);
  try {
    await SERVE[setup.values['no-http'] ? 'worker' : setup.values.stdio ? 'stdio' : 'http'](setup, parts);
  } catch (e) {
    setup.fail((e as Error).message);
  }
}

/** Every flag of the front checked, in the order their refusals are reported; the store and bus made last. */
async function readFront(given: FrontValues, fail: Fail): Promise<FrontSetup> {
  const secrets = resolveSecrets(given, FRONT_OPTIONS);
  if (typeof secrets === 'string') fail(secrets);
  const values: FrontValues = secrets.values;
  const log = cliLogger(values['log-level'] ?? 'info', values['log-format'] ?? 'text');
  if (typeof log === 'string') fail(log);
  // From here on a refusal to start is a log line too (JSON with --log-format json), then exit 2.
  if (values['log-format'] === 'json') fail = (m: string) => (log.error(m.replace(/^outlast: /, '')), process.exit(2));
  const intFlag = (name: string, min = 0) => intFlagOf(values, name, fail, min);
  const ops = opsConfig(values);
  if (typeof ops === 'string') fail(ops);
  const events = eventsConfig(values);
  if (typeof events === 'string') fail(events);
  if (events && (values.stdio || values['no-http'])) fail('--events needs HTTP (webhooks are subscribed over HTTP; not --stdio or --no-http)');
  for (const w of secrets.warnings) log.warn(w);
  if (secrets.sources.length) log.info(`secrets: ${secrets.sources.join('; ')}`);
  const host = values.host ?? '127.0.0.1';
  if (ops.dashboard) checkDashboardFlags(values, host, ops, fail);
  const httpLimits = httpLimitFlags(intFlag, fail);
  // The SDK's meter provider must be registered before the runtime creates its instruments.
  const metrics: MetricsServing | undefined = await metricsServing({ metrics: ops.metrics, listen: values['metrics-listen'], frontHost: values['no-http'] || values.stdio ? undefined : host, tokens: ops.tokens }, fail);
  const { bearer, oauth, allowAnonymousNetwork } = accessFlags(values, host, fail);
  const toolLimits = toolLimitFlags(values, fail);
  if (values['no-http'] && values.stdio) fail('--no-http (a worker replica, serving nothing) and --stdio exclude each other');
  const ttl = intFlag('default-ttl-ms', 1);
  if (values.handles && values['no-handles']) fail('--handles and --no-handles contradict each other');
  const handleAfterMs = intFlag('handle-after-ms');
  const handles = values['no-handles'] ? false : values.handles || handleAfterMs !== undefined ? { ...opt('afterMs', handleAfterMs) } : undefined;
  const leaseMs = intFlag('lease-ms', 1);
  const store = storeFromUrl(values.store ?? 'sqlite:.outlast/tasks.db', fail);
  const bus = typeof values.bus === 'string' ? busFromUrl(values.bus, store, (m) => log.warn(m), fail) : undefined;
  return { values, log, fail, intFlag, ops, events, host, httpLimits, metrics, bearer, oauth, allowAnonymousNetwork, toolLimits, ttl, handles, leaseMs, store, bus };
}

/** --dashboard: HTTP only, and not on a network address without operator tokens. */
function checkDashboardFlags(values: FrontValues, host: string, ops: OpsConfig, fail: Fail): void {
  if (values.stdio) fail('--dashboard needs HTTP (not --stdio); or run `outlast dashboard --store URL` beside it');
  try {
    checkDashboardExposure(host, ops.tokens);
  } catch (e) {
    fail((e as Error).message);
  }
}

/** The node:http limits the flags set (the rest stay at DEFAULT_HTTP_LIMITS). */
function httpLimitFlags(intFlag: FrontSetup['intFlag'], fail: Fail): Partial<HttpLimits> {
  const httpLimits = {
    ...opt('headersTimeoutMs', intFlag('headers-timeout-ms', 1)),
    ...opt('requestTimeoutMs', intFlag('request-timeout-ms', 1)),
    ...opt('keepAliveTimeoutMs', intFlag('keep-alive-timeout-ms', 1)),
    ...opt('maxConnections', intFlag('max-connections', 1)),
  };
  const { headersTimeoutMs, requestTimeoutMs } = { ...DEFAULT_HTTP_LIMITS, ...httpLimits };
  if (headersTimeoutMs > requestTimeoutMs) fail(`--headers-timeout-ms (${headersTimeoutMs}) must not exceed --request-timeout-ms (${requestTimeoutMs}): the headers are part of the request`);
  return httpLimits;
}

/** Who may call: --bearer, the --oauth-* flags, and whether an HTTP address without them is allowed. */
function accessFlags(values: FrontValues, host: string, fail: Fail): Pick<FrontSetup, 'bearer' | 'oauth' | 'allowAnonymousNetwork'> {
  const bearer: Record<string, string> = {};
  for (const b of values.bearer ?? []) {
    const i = b.indexOf('=');
    if (i <= 0 || i === b.length - 1) fail(`--bearer must be TOKEN=PRINCIPAL, got "${b}"`);
    bearer[b.slice(0, i)] = b.slice(i + 1);
  }
  const oauth = oauthFlags(values, fail);
  if (oauth && values.stdio) fail('--oauth-* protects HTTP; stdio takes its principal from the environment (drop --stdio or the --oauth flags)');
  const allowAnonymousNetwork = !!values['allow-anonymous-network'];
  if (allowAnonymousNetwork && (values.stdio || values['no-http'])) fail('--allow-anonymous-network is about the HTTP address (not --stdio or --no-http)');
  const exposed = values.stdio || values['no-http'] ? undefined : anonymousNetwork(host, { bearer, ...(oauth ? { oauth } : {}), allowAnonymousNetwork });
  if (exposed && 'refuse' in exposed) fail(exposed.refuse);
  return { bearer, oauth, allowAnonymousNetwork };
}

/** --tool-limit TOOL=N, each tool once. */
function toolLimitFlags(values: FrontValues, fail: Fail): Record<string, number> {
  const toolLimits: Record<string, number> = {};
  for (const t of values['tool-limit'] ?? []) {
    const m = /^(.+)=(\d+)$/.exec(t);
    if (!m || Number(m[2]) < 1) fail(`--tool-limit must be TOOL=N with N >= 1, got "${t}"`);
    if (m[1]! in toolLimits) fail(`--tool-limit names tool "${m[1]}" twice`);
    toolLimits[m[1]!] = Number(m[2]);
  }
  return toolLimits;
}

/** The command's Outlast mounted with the runtime's flags, and what runs beside it (alerts, event delivery) made. */
async function mountFront(setup: FrontSetup, mount: Mount): Promise<FrontParts> {
  const { values, intFlag, ops, log, store, bus, ttl, handles, leaseMs, toolLimits, events } = setup;
  let mounted: MountedFront;
  try {
    mounted = await mount({
      ...(ops.pushDestinations.length ? { pushDestinations: ops.pushDestinations } : {}),
      ...(handles !== undefined ? { handles } : {}),
      // Answer pages come with handles (the Outlast ignores them when handles are off).
      ...(ops.publicUrl && !values['no-answer-pages'] ? { answerPages: { publicUrl: ops.publicUrl } } : {}),
      store,
      ...(bus ? { bus } : {}),
      log,
      ...(ttl !== undefined ? { defaultTtlMs: ttl } : {}),
      ...opt('inlineBudgetMs', intFlag('inline-budget-ms')),
      ...opt('concurrencyLimit', intFlag('concurrency', 1)),
      ...opt('maxRunning', intFlag('max-running', 1)),
      ...opt('maxQueued', intFlag('max-queued', 1)),
      ...opt('maxRunningPerPrincipal', intFlag('max-running-per-principal', 1)),
      ...opt('maxQueuedPerPrincipal', intFlag('max-queued-per-principal', 1)),
      ...opt('maxTasksPerPrincipal', intFlag('max-tasks-per-principal', 1)),
      ...opt('queuePollMs', intFlag('queue-poll-ms', 1)),
      toolLimits,
      ...opt('defaultPollIntervalMs', intFlag('poll-interval-ms', 1)),
      ...opt('defaultInputTimeoutMs', intFlag('input-timeout-ms', 1)),
      ...opt('parkAfterMs', intFlag('park-after-ms', 0)),
      ...opt('maxResultBytes', intFlag('max-result-bytes', 1)),
      ...opt('maxOutputPerTask', intFlag('max-output-per-task', 1)),
      ...opt('maxOutputBytesPerTask', intFlag('max-output-bytes-per-task', 1)),
      ...opt('sweepIntervalMs', intFlag('sweep-interval-ms', 1)),
      ...opt('heartbeatMs', intFlag('heartbeat-ms', 1)),
      ...opt('leaseMs', leaseMs),
      ...(values['no-poll-limit'] ? { pollLimit: false as const } : {}),
    });
  } catch (e) {
    setup.fail((e as Error).message);
  }
  const { outlast } = mounted;
  log.setReplica(outlast.runtime.replicaId);
  const answerLinkOf = outlast.answers ? { answerLinkOf: (t: Parameters<Outlast['answerLinks']>[0], key: string) => outlast.answerLinks(t).find((l) => l.key === key)?.url } : {};
  const alerts = ops.alertsOn ? new AlertService({ ...ops.alerts, store: outlast.runtime.store, replicaId: outlast.runtime.replicaId, log, ...answerLinkOf }) : undefined;
  const delivery = events ? new EventDelivery({ ...events.delivery, store: outlast.runtime.store, bus: outlast.runtime.bus, replicaId: outlast.runtime.replicaId, log, ...answerLinkOf }) : undefined;
  return { mounted, alerts, delivery };
}

/**
 * SIGTERM (and SIGINT, unless a client started this stdio server): not ready at once, work that may run elsewhere
 * handed over at once, the rest drained while requests are still served (polls, answers, /readyz saying not ready);
 * a second signal ends the drain now.
 */
function onStopSignals(setup: FrontSetup, parts: FrontParts): void {
  const { values, log, metrics } = setup;
  const { outlast } = parts.mounted;
  const drainMs = setup.intFlag('drain-ms') ?? DEFAULT_DRAIN_MS;
  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) {
      log.warn(`${signal} again: ending the drain now; tasks still running that are not safe to re-run fail naming the stop`);
      void outlast.drain(0);
      return;
    }
    stopping = true;
    log.info(`${signal}: shutting down: not ready, tasks that may run elsewhere handed to the other replicas, the rest given up to ${drainMs} ms (--drain-ms); a second ${signal === 'SIGINT' ? 'Ctrl-C' : 'signal'} ends the drain now`);
    try {
      await parts.alerts?.stop();
      await parts.delivery?.stop();
      await outlast.drain(drainMs);
      await parts.http?.close();
      await outlast.stop();
      await metrics?.close();
      await parts.stdio?.close();
      await parts.mounted.close?.();
    } catch (e) {
      log.error(`shutdown: ${(e as Error).message}`);
    }
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  if (values.stdio && !process.stdin.isTTY) {
    // Started by a client: a Ctrl-C on its terminal reaches us too (the whole foreground group), but it is the
    // client's to act on. The client stops us by closing stdin (we finish what runs, then exit) or with SIGTERM.
    process.on('SIGINT', () => log.info('SIGINT ignored: a stdio server under a client stops when its stdin closes, or on SIGTERM'));
  } else process.on('SIGINT', () => void shutdown('SIGINT'));
}

/** The task counts, and /metrics on a listener of its own (a worker's and a stdio server's too), named before the
 *  ready line (on stderr for stdio, whose stdout is the protocol's). */
async function startMetrics(setup: FrontSetup, parts: FrontParts): Promise<void> {
  const { metrics, values, log } = setup;
  if (!metrics) return;
  observeTaskCounts(parts.mounted.outlast.runtime.store);
  const url = await metrics.listen(setup.httpLimits);
  if (url && values.stdio) log.info(`outlast metrics on ${url}`);
  else if (url) log.announce(`outlast metrics on ${url}`, { url });
}

/** The three ways a front serves: a worker replica (--no-http), a stdio server (--stdio), or HTTP. */
const SERVE: Record<'worker' | 'stdio' | 'http', (setup: FrontSetup, parts: FrontParts) => Promise<void>> = {
  async worker(setup, parts) {
    const { outlast, describe } = parts.mounted;
    await outlast.start();
    await startMetrics(setup, parts);
    // Nothing else holds the event loop open in a worker (the runtime's timers do not): stay until a signal.
    setInterval(() => undefined, 3_600_000);
    setup.log.announce(`outlast worker ready: replica ${outlast.runtime.replicaId} runs queued work of ${describe}`);
  },

  async stdio(setup, parts) {
    const { outlast, factory, describe } = parts.mounted;
    parts.stdio = await serveOutlastStdio(outlast, factory, { onerror: (e) => setup.log.serverError(e), tracePolls: !!setup.values['trace-polls'] });
    await startMetrics(setup, parts);
    setup.log.info(`outlast serving ${describe} on stdio`);
  },

  async http(setup, parts) {
    const { values, intFlag, ops, log, metrics, events, oauth, allowAnonymousNetwork } = setup;
    const { outlast, factory, info } = parts.mounted;
    const port = intFlag('port') ?? (process.env.PORT ? Number(process.env.PORT) : 3000);
    const http = await serveHttp(outlast, factory, {
      port,
      host: setup.host,
      bearer: setup.bearer,
      ...(oauth ? { oauth } : {}),
      ...(allowAnonymousNetwork ? { allowAnonymousNetwork } : {}),
      ...(info ? { serverInfo: info } : {}),
      directTaskMethods: !values['no-direct-task-methods'],
      tracePolls: !!values['trace-polls'],
      ...opt('maxBodyBytes', intFlag('max-body-bytes', 1)),
      onerror: (e) => log.serverError(e),
      ...(ops.dashboard
        ? { dashboard: { ...ops.tokens, ...ops.session, showPayloads: ops.showPayloads, ...opt('title', ops.title), ...opt('leaseMs', setup.leaseMs), alertTargets: { ...opt('webhook', ops.alerts.webhook?.url), push: ops.pushDestinations }, log: (m: string, x: Record<string, unknown>) => log.info(m, x) } }
        : {}),
      ...(metrics?.mount ? { metrics: metrics.mount } : {}),
      ...(events ? { events: events.wire } : {}),
      ...opt('maxStreamsPerPrincipal', intFlag('max-streams-per-principal', 1)),
      ...setup.httpLimits,
    });
    parts.http = http;
    await startMetrics(setup, parts);
    parts.alerts?.start();
    parts.delivery?.start();
    log.announce(`outlast listening on ${http.url}`, { url: http.url });
    if (ops.dashboard) log.announce(`outlast dashboard on ${http.url.replace(/\/mcp$/, '/dashboard')}`, { url: http.url.replace(/\/mcp$/, '/dashboard') });
  },
};

/** The `oauth` front option from the --oauth-* flags (undefined without --oauth-issuer). */
function oauthFlags(values: Record<string, unknown>, fail: (message: string) => never): OAuthFrontOptions | undefined {
  const issuers = (values['oauth-issuer'] as string[] | undefined) ?? [];
  const resource = values['oauth-resource'] as string | undefined;
  const others = ['oauth-resource', 'oauth-scopes', 'oauth-principal-claim', 'oauth-allow-http', 'oauth-introspection-client-id', 'oauth-sign-in-client-id', 'oauth-jwks-cooldown-ms', 'oauth-token-cache-ms'];
  if (issuers.length === 0) {
    const stray = others.find((o) => values[o] !== undefined);
    if (stray) fail(`--${stray} needs --oauth-issuer URL`);
    return undefined;
  }
  if (!resource) fail('--oauth-issuer needs --oauth-resource URL (this server\'s public URL, the audience tokens must carry)');
  const scopes = typeof values['oauth-scopes'] === 'string' ? (values['oauth-scopes'] as string).split(',').map((s) => s.trim()).filter(Boolean) : [];
  const introspectionId = values['oauth-introspection-client-id'] as string | undefined;
  const secret = process.env.OUTLAST_OAUTH_INTROSPECTION_SECRET;
  if (introspectionId && !secret) fail('--oauth-introspection-client-id needs the secret in $OUTLAST_OAUTH_INTROSPECTION_SECRET');
  const signInId = values['oauth-sign-in-client-id'] as string | undefined;
  const signInSecret = process.env.OUTLAST_OAUTH_SIGN_IN_CLIENT_SECRET;
  const cooldown = intFlagOf(values, 'oauth-jwks-cooldown-ms', fail, 0);
  const options: OAuthFrontOptions = {
    issuers,
    resource,
    ...(scopes.length ? { scopes } : {}),
    ...opt('principalClaim', values['oauth-principal-claim'] as string | undefined),
    ...(values['oauth-allow-http'] ? { allowHttp: true } : {}),
    ...(introspectionId ? { introspection: { clientId: introspectionId, clientSecret: secret! } } : {}),
    ...(signInId ? { signInClient: { clientId: signInId, ...(signInSecret ? { clientSecret: signInSecret } : {}) } } : {}),
    ...opt('jwksCooldownMs', cooldown),
    ...opt('tokenCacheMs', intFlagOf(values, 'oauth-token-cache-ms', fail, 0)),
  };
  try {
    createOAuthResourceServer(options); // the same checks the front makes, reported as a usage error
  } catch (e) {
    fail((e as Error).message);
  }
  return options;
}

function opt<K extends string, V>(key: K, v: V | undefined): { [P in K]?: V } {
  return (v === undefined ? {} : { [key]: v }) as { [P in K]?: V };
}

