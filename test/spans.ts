/** Reading finished spans from an in-memory exporter in the trace tests. */
import assert from 'node:assert/strict';
import type { InMemorySpanExporter, ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { sleep } from './helpers.js';

/** `named(name, count)`: the finished spans named `name`, waiting a little (2 s) for ones that end after the answer. */
export function spansNamed(exporter: InMemorySpanExporter): (name: string, count?: number) => Promise<ReadableSpan[]> {
  const spans = () => exporter.getFinishedSpans();
  return async (name, count = 1) => {
    for (let i = 0; i < 100; i++) {
      const found = spans().filter((s) => s.name === name);
      if (found.length >= count) return found;
      await sleep(20);
    }
    assert.fail(`no ${count} finished span(s) named "${name}"; have ${spans().map((s) => s.name).join(', ')}`);
  };
}
