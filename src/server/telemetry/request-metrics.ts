/** `mcp.server.operation.duration` (MCP semantic conventions): every JSON-RPC request the HTTP front answers. Its
 *  method and tool labels are only names the server knows (metric-labels.ts): a caller cannot add series. */
import { createNoopMeter, metrics } from '@opentelemetry/api';
import { MCP_BUCKETS } from '../../runtime/telemetry.js';
import { methodLabel, toolLabel } from './metric-labels.js';
import { whenAnswered } from './response-end.js';
import type { Answer } from '../front/exchange.js';

/** Starts timing a parsed request; the function it returns takes the answer (and whether its body may still be
 *  streaming) and records the duration at its end: told by `ended` when the adapter can tell (no relay stream),
 *  else by watching the body. */
export function requestMetrics(knownTool: (name: string) => boolean): (msg: unknown) => ((response: Answer, mayStream: boolean, ended?: (done: () => void) => void) => Answer) | undefined {
  const duration = metrics.getMeter('outlast').createHistogram('mcp.server.operation.duration', {
    unit: 's',
    description: 'MCP requests served over HTTP, request to response end',
    advice: { explicitBucketBoundaries: MCP_BUCKETS },
  });
  // No meter provider was registered before the front was made: the API's meters are no-ops for good (it has no proxy
  // for metrics), so a request is not timed at all.
  if (duration === createNoopMeter().createHistogram('probe')) return () => undefined;
  return (msg) => {
    const m = msg as { method?: unknown; params?: { name?: unknown } } | null;
    if (!m || typeof m !== 'object' || typeof m.method !== 'string') return undefined;
    const start = performance.now();
    const attrs: Record<string, string> = { 'mcp.method.name': methodLabel(m.method), 'network.transport': 'tcp' };
    if (m.method === 'tools/call' && typeof m.params?.name === 'string') attrs['gen_ai.tool.name'] = toolLabel(m.params.name, knownTool);
    return (response, mayStream, ended) => {
      const done = () => {
        if (response.status >= 400) attrs['error.type'] = String(response.status);
        duration.record((performance.now() - start) / 1000, attrs);
      };
      if (!(mayStream && ended)) return whenAnswered(response, 0, done, mayStream);
      ended(done);
      return response;
    };
  };
}
