/** `mcp.server.operation.duration` (MCP semantic conventions): every JSON-RPC request the HTTP front answers. */
import type { ServerResponse } from 'node:http';
import { metrics } from '@opentelemetry/api';
import { MCP_BUCKETS } from '../runtime/telemetry.js';

export function requestMetrics(): (msg: unknown, res: ServerResponse) => void {
  const duration = metrics.getMeter('outlast').createHistogram('mcp.server.operation.duration', {
    unit: 's',
    description: 'MCP requests served over HTTP, request to response end',
    advice: { explicitBucketBoundaries: MCP_BUCKETS },
  });
  return (msg, res) => {
    const m = msg as { method?: unknown; params?: { name?: unknown } } | null;
    if (!m || typeof m !== 'object' || typeof m.method !== 'string') return;
    const start = performance.now();
    const attrs: Record<string, string> = { 'mcp.method.name': m.method, 'network.transport': 'tcp' };
    if (m.method === 'tools/call' && typeof m.params?.name === 'string') attrs['gen_ai.tool.name'] = m.params.name;
    res.once('finish', () => {
      if (res.statusCode >= 400) attrs['error.type'] = String(res.statusCode);
      duration.record((performance.now() - start) / 1000, attrs);
    });
  };
}
