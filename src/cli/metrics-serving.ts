/**
 * `--metrics` and `--metrics-listen HOST:PORT` of `outlast serve` and `outlast gateway`: the Prometheus exporter
 * (registered before the runtime makes its instruments), behind the operators' credentials on the front, or on a
 * listener of its own. Who may read it is decided in ops/metrics-access.ts; each refusal is one line naming the flags.
 */
import type { AddressInfo } from 'node:net';
import { localhostHostValidation } from '@modelcontextprotocol/node';
import { isLoopbackHost, type OperatorTokens } from '../ops/dashboard/index.js';
import { checkMetricsExposure, checkMetricsListen, operatorsOnly } from '../ops/metrics-access.js';
import { startPrometheus, type PrometheusEndpoint } from '../ops/metrics.js';
import { createLimitedServer, type HttpLimits } from '../server/http-limits.js';
import type { NodeMount } from '../server/front/index.js';

export const METRICS_LISTEN_OPTION = { 'metrics-listen': { type: 'string' } } as const;

export interface MetricsServing {
  prometheus: PrometheusEndpoint;
  /** What the front mounts at /metrics; undefined when /metrics has a listener of its own. */
  mount: NodeMount | undefined;
  /** Starts the listener of its own, if any: its URL. */
  listen(limits: HttpLimits): Promise<string | undefined>;
  close(): Promise<void>;
}

/** `HOST:PORT` (an IPv6 host in brackets), or a message saying what to write. */
function hostPort(v: string): { host: string; port: number } | string {
  const m = /^(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(v);
  const port = Number(m?.[2]);
  if (!m || port > 65535) return `--metrics-listen must be HOST:PORT (e.g. 10.0.0.5:9464, [fd00::5]:9464, 127.0.0.1:0), got "${v}"`;
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

/** Checks the flags and registers the exporter; undefined when neither flag is given. */
export async function metricsServing(
  /** `frontHost`: the interface the MCP front binds (undefined: no HTTP front, so /metrics only on its own listener). */
  o: { metrics: boolean; listen: string | undefined; frontHost: string | undefined; tokens: OperatorTokens },
  fail: (message: string) => never,
): Promise<MetricsServing | undefined> {
  if (!o.metrics && o.listen === undefined) return undefined;
  const own = o.listen === undefined ? undefined : hostPort(o.listen);
  if (typeof own === 'string') fail(own);
  try {
    if (own) checkMetricsListen(own.host);
    else if (o.frontHost !== undefined) checkMetricsExposure(o.frontHost, o.tokens);
  } catch (e) {
    fail((e as Error).message);
  }
  let prometheus: PrometheusEndpoint;
  try {
    prometheus = await startPrometheus();
  } catch (e) {
    fail((e as Error).message);
  }
  let server: ReturnType<typeof createLimitedServer> | undefined;
  return {
    prometheus,
    mount: own ? undefined : operatorsOnly(prometheus.handler, o.tokens),
    async listen(limits) {
      if (!own) return undefined;
      const hostCheck = isLoopbackHost(own.host) ? localhostHostValidation() : undefined;
      const s = createLimitedServer(limits, (req, res) => {
        if (hostCheck && !hostCheck(req, res)) return;
        if (req.method === 'GET' && (req.url ?? '/').split('?')[0] === '/metrics') return prometheus.handler(req, res);
        res.writeHead(404, { 'content-type': 'text/plain' }).end('Not found: this listener serves GET /metrics only\n');
      });
      server = s;
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(own.port, own.host, () => {
          s.off('error', reject);
          resolve();
        });
      });
      const shown = own.host.includes(':') ? `[${own.host}]` : own.host;
      return `http://${shown}:${(s.address() as AddressInfo).port}/metrics`;
    },
    async close() {
      if (server) await new Promise<void>((r) => {
        server!.close(() => r());
        server!.closeAllConnections?.();
      });
      await prometheus.shutdown();
    },
  };
}
