/** Waiting for the demo's migrate questions as a person would see them: asked, then parked. */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import type { TaskRecord, TaskStore } from '../src/store/types.js';
import { ROOT, freePort, sleep, startServer, tempDir, type ServerProcess } from './helpers.js';

/** The demo server with answer pages on its own address (`--public-url`) and a SQLite file, that file's store open
 *  beside it (to see a question asked and its wait parked, as a person's delay); `args`: more flags. */
export function startDemoWithPages(args: string[]): Promise<{ server: ServerProcess; store: SqliteTaskStore }> {
  return startModuleWithPages(join(ROOT, 'dist', 'demo', 'server.js'), args);
}

/** As startDemoWithPages, for the server module `module`. */
export async function startModuleWithPages(module: string, args: string[]): Promise<{ server: ServerProcess; store: SqliteTaskStore }> {
  const db = join(tempDir(), 'pages.db');
  const port = await freePort();
  const server = await startServer(['--store', `sqlite:${db}`, '--port', String(port), '--public-url', `http://127.0.0.1:${port}`, ...args], { module });
  const store = new SqliteTaskStore(db);
  await store.init();
  return { server, store };
}

/** A task's row as the store holds it (it must be there). */
export async function row(store: TaskStore, taskId: string): Promise<TaskRecord> {
  const l = await store.get(taskId);
  assert.equal(l.state, 'found');
  return (l as { record: TaskRecord }).record;
}

/** What a browser keeps from a GET of an answer page: its cookie and the form's CSRF field. */
export async function openForm(link: string): Promise<{ status: number; cookie: string; csrf: string; html: string; headers: Headers }> {
  const r = await fetch(link);
  const html = await r.text();
  const cookie = (r.headers.get('set-cookie') ?? '').split(';')[0]!;
  const csrf = /name="csrf" value="([^"]+)"/.exec(html)?.[1] ?? '';
  return { status: r.status, cookie, csrf, html, headers: r.headers };
}

/** A form posted to an answer page, as a browser posts it. */
export function postForm(link: string, fields: Record<string, string>, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(link, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(fields).toString(), redirect: 'manual' });
}

export async function until<T>(what: string, read: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await read();
    if (v !== undefined) return v;
    if (Date.now() > end) assert.fail(`${what}: not within ${timeoutMs} ms`);
    await sleep(25);
  }
}

/** The newest migrate task that waits for its approval, once that wait is parked (no process holds it): of
 *  `principal`, or (read as an operator reads the store) of whoever called, e.g. an anonymous caller's session. */
export async function parkedApproval(store: TaskStore, migration: string, principal?: string): Promise<TaskRecord> {
  return until(`the approval of ${migration} is asked and its wait parked`, async () => {
    const page = principal !== undefined ? await store.listByPrincipal(principal, undefined, 50) : (await store.ops.listTasks({ tool: 'migrate' }, undefined, 50)).rows;
    for (const t of page) {
      if (t.tool !== 'migrate') continue;
      const l = await store.get(t.taskId);
      if (l.state !== 'found') continue;
      const r = l.record;
      if ((r.args as { migration?: string }).migration === migration && r.inputRequests.approval && r.parkedAt !== null && r.owner === null) return r;
    }
    return undefined;
  });
}

