/**
 * The bus kit: what every SignalBus that crosses processes must do, as node:test suites, whatever carries it
 * (PostgreSQL LISTEN/NOTIFY, Redis pub/sub, a third party's). `runSignalBusKit('redis', { open })`, where
 * `open(channel)` returns a bus (not started) on that channel; two buses on one channel stand for two replicas.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, describe, it } from 'node:test';
import type { SignalBus, SignalKind, TaskSignal } from '../local-bus.js';

export interface SignalBusKitOptions {
  /** A new bus on `channel` (the kit starts and closes it). */
  open(channel: string): SignalBus | Promise<SignalBus>;
}

const KINDS: SignalKind[] = ['changed', 'cancel', 'input', 'queue', 'output'];

async function until(what: string, cond: () => boolean, timeoutMs = 3000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function runSignalBusKit(name: string, kit: SignalBusKitOptions): void {
  describe(`bus kit: ${name}`, () => {
    const opened: SignalBus[] = [];
    const open = async (channel: string) => {
      const bus = await kit.open(channel);
      await bus.start?.();
      opened.push(bus);
      return bus;
    };
    after(async () => {
      for (const b of opened) await b.close().catch(() => undefined);
    });
    const channel = () => `kit_${randomBytes(5).toString('hex')}`;

    it('names its carrier and is connected once started', async () => {
      const bus = await open(channel());
      assert.equal(typeof bus.carrier, 'string');
      assert.notEqual(bus.carrier, 'none');
      assert.equal(bus.connected, true);
    });

    it('carries every kind of signal to another process, once, and to its own subscribers at once', async () => {
      const ch = channel();
      const a = await open(ch);
      const b = await open(ch);
      const onB: TaskSignal[] = [];
      const onA: TaskSignal[] = [];
      b.subscribeAll((s) => onB.push(s));
      a.subscribeAll((s) => onA.push(s));
      for (const kind of KINDS) a.publish({ taskId: `task-${kind}`, kind });
      assert.equal(onA.length, KINDS.length, 'the publisher\'s own subscribers hear it without the round trip');
      await until('every kind on the other bus', () => onB.length >= KINDS.length);
      await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(onB.map((s) => s.kind).sort(), [...KINDS].sort());
      assert.equal(onA.length, KINDS.length, 'no echo of its own signals through the carrier');
    });

    it('delivers to per-task subscribers, and a burst of thousands in one turn arrives whole (coalesced, split under the size limit)', async () => {
      const ch = channel();
      const a = await open(ch);
      const b = await open(ch);
      const one: TaskSignal[] = [];
      b.subscribe('task-one', (s) => one.push(s));
      const all = new Set<string>();
      b.subscribeAll((s) => all.add(s.taskId));
      const ids = Array.from({ length: 3000 }, (_, i) => `burst-${i}-${randomBytes(8).toString('hex')}`);
      for (const id of ids) a.publish({ taskId: id, kind: 'changed' });
      a.publish({ taskId: 'task-one', kind: 'cancel' });
      await until('the whole burst', () => ids.every((id) => all.has(id)), 5000);
      await until('the per-task signal', () => one.length === 1);
      assert.deepEqual(one, [{ taskId: 'task-one', kind: 'cancel' }]);
    });

    it('keeps deployments apart: a bus on another channel hears nothing', async () => {
      const a = await open(channel());
      const other = await open(channel());
      const heard: TaskSignal[] = [];
      other.subscribeAll((s) => heard.push(s));
      a.publish({ taskId: 'x', kind: 'changed' });
      await new Promise((r) => setTimeout(r, 200));
      assert.deepEqual(heard, []);
    });

    it('after close, sends nothing and hears nothing', async () => {
      const ch = channel();
      const a = await open(ch);
      const b = await open(ch);
      const heard: TaskSignal[] = [];
      b.subscribeAll((s) => heard.push(s));
      await b.close();
      a.publish({ taskId: 'late', kind: 'changed' });
      await new Promise((r) => setTimeout(r, 200));
      assert.deepEqual(heard, []);
      assert.equal(b.connected ?? false, false);
    });
  });
}
