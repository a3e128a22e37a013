/**
 * The task-output side of the store test kit: numbers 1, 2, 3 … assigned where the rows are written (no gap, from
 * two connections), appends only by the run that holds the task (owner and epoch, unfinished), keyed items skipped
 * when stored (a replayed step), the oldest dropped past the per-task bounds (count and bytes) with the earliest
 * retained number reported, reads bound to the task's principal, and output gone with its task. Called by
 * runStoreTestKit.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { TaskWriteRefused, type TaskStore } from '../types.js';
import { cursorGone, type OutputBounds, type OutputWrite } from '../output.js';
import { newTask } from './new-task.js';

type Open = () => Promise<{ store: TaskStore; location: string }>;

const WIDE: OutputBounds = { maxItems: 10_000, maxBytes: 16 * 1024 * 1024 };
const text = (t: string, key: string | null = null): OutputWrite => ({ type: 'text', data: JSON.stringify({ text: t }), key });

async function refusalOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof TaskWriteRefused) return e.reason;
    throw e;
  }
  assert.fail('the append was accepted');
}

export function outputKit(openNew: Open, openAt: (location: string) => Promise<{ store: TaskStore }>): void {
  // A store per case: the kit closes each case's stores when it ends, so their connections do not add up.
  const open = openNew;
  it('output: appends from two connections get 1, 2, 3 … in order with no gap; reads return them after a cursor', async () => {
    const { store, location } = await open();
    const { store: other } = await openAt(location);
    const { record } = await store.create(newTask());
    const fence = { owner: 'replica-a', epoch: record.epoch };
    const writes: Promise<unknown>[] = [];
    for (let i = 1; i <= 20; i++) writes.push((i % 2 ? store : other).output.append(record.taskId, fence, [text(`a${i}`), text(`b${i}`)], WIDE, Date.now()));
    await Promise.all(writes);
    const page = await other.output.read(record.taskId, 'alice', 0, 1000);
    assert.ok(page);
    assert.deepEqual(page.items.map((i) => i.seq), Array.from({ length: 40 }, (_, i) => i + 1));
    // Each append's two items are adjacent: numbers are assigned where the rows are written, per append.
    for (let i = 0; i < 40; i += 2) {
      const a: string = (page.items[i]!.data as { text: string }).text;
      const b: string = (page.items[i + 1]!.data as { text: string }).text;
      assert.equal(a.slice(1), b.slice(1));
    }
    assert.equal(page.first, 1);
    assert.equal(page.last, 40);
    assert.equal(page.status, 'working');
    const tail = await store.output.read(record.taskId, 'alice', 37, 1000);
    assert.deepEqual(tail!.items.map((i) => i.seq), [38, 39, 40]);
    assert.deepEqual((await store.output.read(record.taskId, 'alice', 40, 1000))!.items, []);
    const view = await other.view(record.taskId);
    assert.equal(view.state === 'found' && view.record.outputSeq, 40, 'tasks/get reads the latest number');
  });

  it('output: only the run holding the task appends; a terminal task refuses; nothing of a refused append is stored', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask());
    const fence = { owner: 'replica-a', epoch: record.epoch };
    await store.output.append(record.taskId, fence, [text('one')], WIDE, Date.now());
    assert.equal(await refusalOf(store.output.append(record.taskId, { owner: 'replica-b', epoch: record.epoch }, [text('x')], WIDE, Date.now())), 'fenced');
    assert.equal(await refusalOf(store.output.append(record.taskId, { owner: 'replica-a', epoch: record.epoch + 1 }, [text('x')], WIDE, Date.now())), 'fenced');
    const taken = await store.takeOver(record.taskId, 'replica-a', 'replica-b', Date.now());
    assert.equal(await refusalOf(store.output.append(record.taskId, fence, [text('late')], WIDE, Date.now())), 'fenced');
    await store.output.append(record.taskId, { owner: 'replica-b', epoch: taken.epoch }, [text('two')], WIDE, Date.now());
    await store.finish(record.taskId, 'replica-b', { status: 'completed', result: { content: [] } }, null, Date.now(), taken.epoch);
    assert.equal(await refusalOf(store.output.append(record.taskId, { owner: 'replica-b', epoch: taken.epoch }, [text('after')], WIDE, Date.now())), 'terminal');
    assert.equal(await refusalOf(store.output.append('t-missing', fence, [text('x')], WIDE, Date.now())), 'missing');
    const page = await store.output.read(record.taskId, 'alice', 0, 100);
    assert.deepEqual(page!.items.map((i) => [i.seq, (i.data as { text: string }).text]), [[1, 'one'], [2, 'two']]);
    assert.equal(page!.status, 'completed');
  });

  it('output: a keyed item already stored is skipped (a replayed step), without taking a number', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask());
    const fence = { owner: 'replica-a', epoch: record.epoch };
    assert.deepEqual(await store.output.append(record.taskId, fence, [text('s1', 'step#1/1'), text('s2', 'step#1/2')], WIDE, Date.now()), { added: 2, last: 2 });
    const again = await store.output.append(record.taskId, fence, [text('s1', 'step#1/1'), text('s2', 'step#1/2'), text('s3', 'step#1/3')], WIDE, Date.now());
    assert.deepEqual(again, { added: 1, last: 3 });
    const page = await store.output.read(record.taskId, 'alice', 0, 100);
    assert.deepEqual(page!.items.map((i) => (i.data as { text: string }).text), ['s1', 's2', 's3']);
  });

  it('output: past the count or byte bound the oldest go; the earliest retained number moves up and older cursors are gone', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask());
    const fence = { owner: 'replica-a', epoch: record.epoch };
    for (let i = 1; i <= 12; i++) await store.output.append(record.taskId, fence, [text(`l${i}`)], { maxItems: 5, maxBytes: 1 << 20 }, Date.now());
    const page = (await store.output.read(record.taskId, 'alice', 0, 100))!;
    assert.deepEqual(page.items.map((i) => i.seq), [8, 9, 10, 11, 12]);
    assert.equal(page.first, 8);
    assert.equal(page.last, 12);
    assert.equal(cursorGone(0, page), true);
    assert.equal(cursorGone(6, page), true);
    assert.equal(cursorGone(7, page), false, 'a cursor right before the earliest retained misses nothing');
    assert.equal(cursorGone(12, page), false);

    // Bytes: each item's data is {"text":"xxxxxxxxxx"} (21 bytes); 70 bytes keep the newest three.
    const { record: r2 } = await store.create(newTask());
    const f2 = { owner: 'replica-a', epoch: r2.epoch };
    await store.output.append(r2.taskId, f2, Array.from({ length: 6 }, () => text('x'.repeat(10))), { maxItems: 100, maxBytes: 70 }, Date.now());
    const p2 = (await store.output.read(r2.taskId, 'alice', 0, 100))!;
    assert.deepEqual(p2.items.map((i) => i.seq), [4, 5, 6]);
    // One item larger than the whole byte bound: the newest is always kept.
    await store.output.append(r2.taskId, f2, [text('y'.repeat(200))], { maxItems: 100, maxBytes: 70 }, Date.now());
    const p3 = (await store.output.read(r2.taskId, 'alice', 0, 100))!;
    assert.deepEqual(p3.items.map((i) => i.seq), [7]);
    assert.equal(p3.first, 7);
  });

  it('output: another principal reads nothing (as unknown); output goes with its task', async () => {
    const { store } = await open();
    const { record } = await store.create(newTask({ ttlMs: 1 }));
    await store.output.append(record.taskId, { owner: 'replica-a', epoch: record.epoch }, [text('secret')], WIDE, Date.now());
    assert.equal(await store.output.read(record.taskId, 'mallory', 0, 100), undefined);
    assert.equal(await store.output.read('t-unknown', 'alice', 0, 100), undefined);
    await store.finish(record.taskId, 'replica-a', { status: 'completed', result: { content: [] } }, null, Date.now());
    await new Promise((r) => setTimeout(r, 5));
    await store.sweep(Date.now() + 1000, 60_000, 100);
    assert.equal(await store.output.read(record.taskId, 'alice', 0, 100), undefined);
  });
}
