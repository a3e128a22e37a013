/**
 * The SDK is a peer: Outlast reaches into its internals (see ../shared/sdk-notes.md), so it runs only on the minor
 * versions it is tested with, and only with the one copy it imports. Outside them it refuses at start-up, naming both.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** The tested ranges: the same as package.json's peerDependencies (a test holds them equal). */
export const SDK_PEER_RANGES = { '@modelcontextprotocol/server': '~2.4.0' } as const;

const require = createRequire(import.meta.url);

/** Version and folder of the copy of `name` that Outlast imports. */
export function installedSdk(name: string): { version: string; dir: string } {
  let dir = dirname(require.resolve(name));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === name && typeof pkg.version === 'string') return { version: pkg.version, dir };
    } catch {
      /* no package.json here */
    }
    const up = dirname(dir);
    if (up === dir) throw new Error(`outlast: cannot find the package.json of ${name}`);
    dir = up;
  }
}

/** Whether `version` (x.y.z, maybe with a pre-release) is in `range`: ~x.y.z, ^x.y.z (x > 0) or x.y.z. */
export function inRange(version: string, range: string): boolean {
  const v = /^(\d+)\.(\d+)\.(\d+)(-[\w.]+)?$/.exec(version);
  const r = /^([~^]?)(\d+)\.(\d+)\.(\d+)$/.exec(range);
  if (!v || !r || v[4]) return false;
  const [maj, min, pat] = [Number(v[1]), Number(v[2]), Number(v[3])];
  const [rMaj, rMin, rPat] = [Number(r[2]), Number(r[3]), Number(r[4])];
  if (r[1] === '') return maj === rMaj && min === rMin && pat === rPat;
  if (maj !== rMaj) return false;
  if (r[1] === '~' && min !== rMin) return false;
  return min > rMin || (min === rMin && pat >= rPat);
}

/** Throws, naming the version found and the range tested, when the SDK Outlast imports is outside it. */
export function checkSdkPeer(found: (name: string) => string = (n) => installedSdk(n).version): void {
  for (const [name, range] of Object.entries(SDK_PEER_RANGES)) {
    const version = found(name);
    if (!inRange(version, range)) {
      throw new Error(`outlast: ${name} ${version} is installed, but Outlast is tested with ${name}@${range} (it relies on the SDK's internals): install ${name}@${range}`);
    }
  }
}

/** The refusal of an McpServer from another copy of the SDK than the one Outlast imports. */
export function foreignMcpServer(): string {
  const { version, dir } = installedSdk('@modelcontextprotocol/server');
  return `outlast: attach() got an McpServer from another copy of @modelcontextprotocol/server than Outlast's (${version} at ${dir}); two copies break Outlast silently. Keep one: npm dedupe, or install @modelcontextprotocol/server@${SDK_PEER_RANGES['@modelcontextprotocol/server']} once`;
}
