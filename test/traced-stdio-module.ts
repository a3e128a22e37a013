/**
 * A server module for the stdio trace test: registers an OpenTelemetry SDK as an application would (async-local
 * context, W3C propagator) whose spans are appended as JSON lines to the file named by OUTLAST_TEST_SPANS, and two
 * tools: an inline one and one that is always a task.
 */
import { appendFileSync } from 'node:fs';
import { SimpleSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { defineServer } from '../src/server/module/module.js';

/** Spans go to this file; without it (the test runner loads every module of test/) no SDK is registered. */
const file = process.env.OUTLAST_TEST_SPANS;

const toFile = (path: string): SpanExporter => ({
  export(spans: ReadableSpan[], done) {
    for (const s of spans) {
      const line = { name: s.name, kind: s.kind, traceId: s.spanContext().traceId, spanId: s.spanContext().spanId, parentSpanId: s.parentSpanContext?.spanId, attributes: s.attributes, status: s.status.code };
      appendFileSync(path, `${JSON.stringify(line)}\n`);
    }
    done({ code: 0 }); // ExportResultCode.SUCCESS
  },
  async shutdown() {},
});
if (file) new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(toFile(file))] }).register();

export default defineServer({
  info: { name: 'traced-stdio', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('quick', { description: 'Answers at once.', policy: 'never' }, async () => ({ content: [{ type: 'text', text: 'done' }] }));
    outlast.tool('work', { description: 'Always a task.', policy: 'always' }, async () => ({ content: [{ type: 'text', text: 'worked' }] }));
  },
});
