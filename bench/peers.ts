/**
 * The peers the bench measures Outlast against that the project itself does not need (DBOS Transact, supergateway):
 * installed into bench/peers/ from its own lockfile the first time a row needs them, so a contributor's `npm ci` does
 * not grow. Loaded from there by path (they are not in the project's node_modules).
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ROOT } from './common.js';

/** bench/peers in the source tree (the folder holds no code: a package.json and its lockfile). */
export const PEERS = join(ROOT, 'bench', 'peers');

/** Installs the peers once (npm ci from bench/peers/package-lock.json); a no-op when they are there. */
export function ensurePeers(log: (m: string) => void = () => undefined): void {
  if (existsSync(join(PEERS, 'node_modules', '.package-lock.json'))) return;
  log('installing the bench peers into bench/peers (npm ci, once)');
  execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--prefix', PEERS], { stdio: ['ignore', 'ignore', 'inherit'] });
}

/** Resolves a peer's module from bench/peers (throws saying how to install them if they are not). */
export function peerPath(specifier: string): string {
  try {
    return createRequire(join(PEERS, 'package.json')).resolve(specifier);
  } catch {
    throw new Error(`${specifier} is not installed in bench/peers: run npm ci --prefix bench/peers (the bench does it itself)`);
  }
}

/** Imports a peer's module from bench/peers. */
export async function importPeer<T>(specifier: string): Promise<T> {
  return (await import(pathToFileURL(peerPath(specifier)).href)) as T;
}
