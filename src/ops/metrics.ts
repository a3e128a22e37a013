/**
 * `--metrics`: the OpenTelemetry SDK's meter provider with the Prometheus exporter (optional dependencies, loaded
 * only when asked for), registered globally before the runtime is built, and served by the HTTP front at /metrics.
 * Also the one metric read from the store: tasks by state (`outlast.task.count`), which covers the whole
 * deployment, so every replica reports the same figure (aggregate with max, not sum).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { metrics } from '@opentelemetry/api';
import type { TaskStore } from '../store/types.js';

export interface PrometheusEndpoint {
  handler(req: IncomingMessage, res: ServerResponse): void;
  shutdown(): Promise<void>;
}

export async function startPrometheus(): Promise<PrometheusEndpoint> {
  let sdk: typeof import('@opentelemetry/sdk-metrics');
  let prom: typeof import('@opentelemetry/exporter-prometheus');
  try {
    [sdk, prom] = await Promise.all([import('@opentelemetry/sdk-metrics'), import('@opentelemetry/exporter-prometheus')]);
  } catch (e) {
    throw new Error(`--metrics needs the optional dependencies @opentelemetry/sdk-metrics@~2.12 and @opentelemetry/exporter-prometheus@~0.223 (npm install them; they run on Node 20): ${(e as Error).message}`);
  }
  const exporter = new prom.PrometheusExporter({ preventServerStart: true });
  const provider = new sdk.MeterProvider({ readers: [exporter] });
  metrics.setGlobalMeterProvider(provider);
  return {
    handler: (req, res) => exporter.getMetricsRequestHandler(req, res),
    shutdown: () => provider.shutdown(),
  };
}

/** Reports tasks by state from the store's counters (read at most every `everyMs`; a collection never waits on it). */
export function observeTaskCounts(store: TaskStore, everyMs = 5000): () => void {
  const gauge = metrics.getMeter('outlast').createObservableUpDownCounter('outlast.task.count', { unit: '{task}', description: 'Stored tasks by state, whole deployment' });
  let last: Awaited<ReturnType<TaskStore['ops']['counts']>> | undefined;
  let readAt = 0;
  const refresh = () => {
    if (Date.now() - readAt < everyMs) return;
    readAt = Date.now();
    store.ops.counts(10_000).then((c) => (last = c), () => undefined);
  };
  const callback = (r: { observe(v: number, a: Record<string, string>): void }) => {
    refresh();
    if (!last) return;
    for (const [status, n] of Object.entries(last.byStatus)) r.observe(n, { 'outlast.task.status': status });
    r.observe(last.unreadFailures, { 'outlast.task.status': 'failed', 'outlast.task.retrieved': 'false' });
  };
  gauge.addCallback(callback);
  refresh();
  return () => gauge.removeCallback(callback);
}
