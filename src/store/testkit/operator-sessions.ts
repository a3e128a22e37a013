/**
 * The dashboard-session side of the store test kit: a session opened through one handle is read through another,
 * its last use only moves forward, signing out removes it for every handle, and each sign-in removes the expired
 * sessions and keeps a bounded number per token. Called by runStoreTestKit.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { it } from 'node:test';
import type { OperatorSession } from '../operator-sessions.js';
import type { TaskStore } from '../types.js';

type Open = () => Promise<{ store: TaskStore; location: string }>;

function session(tokenDigest: string, createdAt: number, ttlMs = 3_600_000): OperatorSession {
  return { id: randomUUID(), operator: 'anna', tokenDigest, createdAt, lastSeenAt: createdAt, expiresAt: createdAt + ttlMs };
}

export function operatorSessionsKit(openNew: Open, openAt: (location: string) => Promise<{ store: TaskStore }>): void {
  it('operator sessions: read through another handle; last use only moves forward; signing out ends it for every handle', async () => {
    const { store, location } = await openNew();
    const { store: other } = await openAt(location);
    const now = Date.now();
    const s = session(`t-${randomUUID()}`, now);
    await store.operatorSessions.open(s, 10);
    assert.deepEqual(await other.operatorSessions.get(s.id), s);
    await other.operatorSessions.touch(s.id, now + 5000);
    await store.operatorSessions.touch(s.id, now + 1000);
    assert.equal((await store.operatorSessions.get(s.id))?.lastSeenAt, now + 5000, 'an older touch does not move it back');
    assert.equal(await other.operatorSessions.end(s.id), true);
    assert.equal(await store.operatorSessions.get(s.id), undefined);
    assert.equal(await store.operatorSessions.end(s.id), false, 'ending it again finds nothing');
    assert.equal(await store.operatorSessions.get('never-opened'), undefined);
  });

  it('operator sessions: a sign-in removes expired sessions and keeps the newest per token within the bound', async () => {
    const { store } = await openNew();
    const token = `t-${randomUUID()}`;
    const now = Date.now();
    const expired = session(`other-${randomUUID()}`, now - 10_000, 5_000);
    await store.operatorSessions.open(expired, 10);
    const mine: OperatorSession[] = [];
    for (let i = 0; i < 4; i++) {
      const s = session(token, now + i);
      mine.push(s);
      await store.operatorSessions.open(s, 3);
    }
    assert.equal(await store.operatorSessions.get(expired.id), undefined, 'the expired session is gone');
    assert.equal(await store.operatorSessions.get(mine[0]!.id), undefined, 'the oldest past the bound is gone');
    for (const s of mine.slice(1)) assert.ok(await store.operatorSessions.get(s.id), 'the newest three are kept');
  });
}
