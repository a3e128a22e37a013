/**
 * MCP Events on PostgreSQL with two real replicas (the suite is test/replica-suites.ts's, run through the pooler too):
 * a webhook subscribed on one replica is delivered, signed, for a task finished on the other; a question (parked,
 * answered later) is seen as outlast.task.input_required by poll and webhook, and outlast.task.status follows that one
 * task through every change. A server without --events answers events/* with -32601.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { freshSchema, pgStoreUrl, rpc, startServer, tempDir } from './helpers.js';
import { EVENTS_MODULE, eventsSuite } from './replica-suites.js';

eventsSuite('on PostgreSQL', () => ({ storeUrl: pgStoreUrl(freshSchema('ev')), args: [] }));

describe('MCP Events off', () => {
  it('a server without --events answers events/* with -32601 and does not advertise them', async () => {
    const plain = await startServer(['--store', `sqlite:${join(tempDir(), 't.db')}`], { module: EVENTS_MODULE });
    try {
      const r = await rpc(plain.url, 'events/list', {});
      assert.equal(r.error?.code, -32601);
      const d = await rpc(plain.url, 'server/discover', {});
      assert.equal(d.result.capabilities.events, undefined);
    } finally {
      await plain.stop('SIGTERM');
    }
  });
});
