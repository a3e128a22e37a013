/**
 * Security review, finding 7 (issue 40): `events/subscribe` resolved a refused webhook host for the caller ("localhost
 * resolves to 127.0.0.1"). A real `outlast serve --events`: a refused callback is named by its category only
 * (loopback, private, link-local, metadata, …), never by an address; the operator's log says which address it was.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { rpc, startServer, tempDir, until, type ServerProcess } from './helpers.js';

const TOKEN = 'events-token-0001';
const secret = () => `whsec_${randomBytes(32).toString('base64')}`;

describe('security: refused webhook hosts', () => {
  let server: ServerProcess;
  before(async () => {
    server = await startServer(['--store', `sqlite:${join(tempDir(), 'tasks.db')}`, '--events', '--bearer', `${TOKEN}=alice`]);
  });
  after(async () => {
    await server?.stop();
  });

  const subscribe = (url: string) =>
    rpc(server.url, 'events/subscribe', { name: 'outlast.task.finished', arguments: {}, delivery: { mode: 'webhook', url, secret: secret() } }, { token: TOKEN });

  it('events: a refused webhook host is named by its category, never by the address it resolves to', async () => {
    const r = await subscribe('https://localhost:9/hook');
    assert.equal(r.error?.code, -32602, JSON.stringify(r.message));
    assert.match(r.error!.message, /resolves to a loopback address, not a public one; the operator must allow that host with --events-allow-host/);
    assert.deepEqual(r.error!.data, { reason: 'blocked_address', category: 'loopback' });
    const said = JSON.stringify(r.message);
    assert.doesNotMatch(said, /127\.0\.0\.1|::1|\[::|0:0:0/, `no address in the answer: ${said}`);
    // The operator's log has the address.
    await until('the refusal in the operator log', () => /events\/subscribe refused a callback host/.test(server.stderr()));
    assert.match(server.stderr(), /localhost resolves to (127\.0\.0\.1|::1)/);
  });

  it('events: literal addresses are refused by category (loopback, private, link-local, metadata)', async () => {
    for (const [url, category] of [
      ['https://127.0.0.1/hook', 'a loopback'],
      ['https://[::ffff:127.0.0.1]/hook', 'a loopback'],
      ['https://10.1.2.3/hook', 'a private'],
      ['https://[fd12::1]/hook', 'a private'],
      ['https://169.254.10.10/hook', 'a link-local'],
      ['https://169.254.169.254/latest/meta-data', 'a metadata'],
      ['https://100.64.1.1/hook', 'a shared \\(CGNAT\\)'],
    ] as const) {
      const r = await subscribe(url);
      assert.equal(r.error?.code, -32602, `${url}: ${JSON.stringify(r.message)}`);
      assert.match(r.error!.message, new RegExp(`points at ${category} address, not a public one`), url);
    }
  });

  it('events: decimal, hex and octal forms of a loopback address are refused as loopback, as the URL parser reads them', async () => {
    for (const url of ['https://2130706433/hook', 'https://0x7f000001/hook', 'https://0177.0.0.1/hook', 'https://0x7f.1/hook', 'https://127.1/hook']) {
      const r = await subscribe(url);
      assert.equal(r.error?.code, -32602, `${url}: ${JSON.stringify(r.message)}`);
      assert.match(r.error!.message, /^delivery\.url points at a loopback address, not a public one/, url);
    }
  });
});
