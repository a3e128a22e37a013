/**
 * A real browser for the dashboard tests: Debian's chromium (installed by .ci/run) driven by playwright-core, which
 * never downloads a browser. The browser process is started through launchServer so the test knows its pid and
 * stops it by that pid if closing fails.
 */
import { after } from 'node:test';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserServer } from 'playwright-core';
import { ROOT } from './helpers.js';

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
