// test:quick: starts no process and no browser (npm run test:quick).
/**
 * The fault proxy's own abrupt close (fault-proxy.ts `abort`): a connection is reset, or closed when its end is already
 * under way, and either way its handle really closes. A handle left open made the store-failover test process spin at
 * exit without printing its summary.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { abort } from './fault-proxy.js';

/** A loopback connection: our end (accepted by a server) and the peer's. */
async function connection(): Promise<{ ours: Socket; peer: Socket; done: () => void }> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const peer = connect((server.address() as { port: number }).port, '127.0.0.1');
  peer.on('error', () => undefined);
  const [ours] = (await once(server, 'connection')) as [Socket];
  ours.on('error', () => undefined);
  return { ours, peer, done: () => server.close() };
}

/** Resolves with true once `s` emits 'close', false if it has not within `ms`. */
const closes = (s: Socket, ms = 2000) =>
  Promise.race([once(s, 'close').then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);

describe('fault proxy: abort()', () => {
  it('resets a connection: the peer hears ECONNRESET', async () => {
    const { ours, peer, done } = await connection();
    const heard = new Promise<string | undefined>((r) => peer.once('error', (e: NodeJS.ErrnoException) => r(e.code)));
    abort(ours);
    assert.equal(await closes(ours), true, 'our end closed');
    assert.equal(await heard, 'ECONNRESET');
    done();
  });

  it('closes a connection whose end is under way (its shutdown not yet run by libuv) instead of leaving its handle open', async () => {
    const { ours, peer, done } = await connection();
    peer.on('end', () => peer.destroy());
    ours.end();
    // A few ticks later node has asked libuv for the shutdown, which libuv runs only after its next poll.
    const later = (n: number, f: () => void): void => (n === 0 ? f() : process.nextTick(() => later(n - 1, f)));
    const closed = closes(ours);
    later(5, () => abort(ours));
    assert.equal(await closed, true, 'its handle closed (resetAndDestroy would have failed with EINVAL and kept it open)');
    done();
  });
});
