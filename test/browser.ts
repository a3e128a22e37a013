/**
 * A real browser for the dashboard tests: Debian's chromium (installed by .ci/run) driven by playwright-core, which
 * never downloads a browser. The browser process is started through launchServer so the test knows its pid and
 * stops it by that pid if closing fails.
 */
import { after, before } from 'node:test';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserServer, type Page } from 'playwright-core';
import { SqliteTaskStore } from '../src/store/sqlite/index.js';
import { HOST } from '../src/runtime/recovery.js';
import { ROOT, startServer, tempDir, type ServerProcess } from './helpers.js';

export const CHROMIUM = process.env.OUTLAST_CHROMIUM ?? '/usr/bin/chromium';
export const ARTIFACTS = join(ROOT, 'test-artifacts');

const servers = new Set<BrowserServer>();

export async function launchBrowser(): Promise<Browser> {
  const server = await chromium.launchServer({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  servers.add(server);
  const browser = await chromium.connect(server.wsEndpoint());
  browser.on('disconnected', () => undefined);
  return browser;
}

export function artifact(name: string): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return join(ARTIFACTS, name);
}

after(async () => {
  for (const s of servers) {
    const pid = s.process().pid;
    await s.close().catch(() => undefined);
    if (pid) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  }
  servers.clear();
});

/** What a dashboard suite works with (filled in by its `before`). */
export interface DashboardSuite {
  browser: Browser;
  server: ServerProcess;
  /** The dashboard's address (…/dashboard). */
  base: string;
}

/** For the enclosing suite: a SQLite store filled by `seed`, a real `outlast serve --dashboard` on it with `args` (of
 *  the fixture server, or `opts.module`), and a browser; all stopped after the suite. */
export function useDashboard(seed: (db: string) => Promise<void>, args: string[], opts: { module?: string } = {}): DashboardSuite {
  const suite = {} as DashboardSuite;
  before(async () => {
    const db = join(tempDir(), 'tasks.db');
    await seed(db);
    // The seeder's heartbeat is the one it wrote when seeding: a lease of 10 min keeps it alive for the whole file
    // (at the default 30 s, a file slowed by the others' load saw the server take the seeded tasks over).
    const lease = args.includes('--lease-ms') ? [] : ['--lease-ms', '600000', '--heartbeat-ms', '5000'];
    suite.server = await startServer(['--store', `sqlite:${db}`, '--dashboard', ...lease, ...args], opts);
    suite.base = suite.server.url.replace(/\/mcp$/, '/dashboard');
    suite.browser = await launchBrowser();
  });
  after(async () => {
    await suite.browser?.close();
    await suite.server?.stop();
  });
  return suite;
}

/** A SQLite store at `path` to seed, with the replica 'seeder' registered as this process (alive, so the server does
 *  not take its tasks over); close it before the server starts. */
export async function seedStore(path: string): Promise<{ store: SqliteTaskStore; now: number }> {
  const store = new SqliteTaskStore(path);
  await store.init();
  const now = Date.now();
  await store.registerReplica({ replicaId: 'seeder', host: HOST, pid: process.pid, startedAt: now, heartbeatAt: now });
  return { store, now };
}

/** Counts the dialogs a page opens (script from a task's text would open one), dismissing each. */
export function countDialogs(page: Page): () => number {
  let n = 0;
  page.on('dialog', (d) => {
    n++;
    void d.dismiss();
  });
  return () => n;
}
