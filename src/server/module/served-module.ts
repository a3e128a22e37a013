/**
 * The shapes of module `outlast serve FILE` accepts, recognised in one place with one error that names them all:
 *   - `export default defineServer({ info, setup, define, register })` (or the same as named exports): the CLI makes
 *     the Outlast from its flags (store, lease, …) and runs `setup` on it;
 *   - a module that makes its own Outlast, as the README's quick start does: `export const outlast = new Outlast(…)`
 *     with `export const serverInfo = { name, version }` (the direct path on) and/or `export function createServer()`
 *     (a per-request McpServer for plain SDK tools; default `new McpServer(serverInfo)`).
 * A module that calls `serveHttp` (or `serveOutlastStdio`) itself while it is imported is told so: it serves itself.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Implementation } from '@modelcontextprotocol/server';
import { Outlast } from '../outlast.js';
import type { OutlastServerModule } from './module.js';
import type { ServerFactory } from '../front/index.js';

/** What a module served by the CLI turned out to be. */
export type ServedModule =
  | { kind: 'definition'; module: OutlastServerModule }
  | { kind: 'outlast'; outlast: Outlast; serverInfo: Implementation | undefined; createServer: ServerFactory | undefined };

/** The accepted shapes, in one sentence. */
export const ACCEPTED_SHAPES =
  'outlast serve takes a module that exports `outlast` (a new Outlast({...}) with its tools) with `serverInfo` ({ name, version }) ' +
  'or `createServer` (a function returning an McpServer), as the README\'s quick start does, or that default-exports ' +
  'defineServer({ info, setup }) (docs/server-authors.md#a-module-served-by-the-cli)';

// On globalThis, so a module that imports another copy of this package still sees it.
const IMPORTING = Symbol.for('outlast.importingServedModule');
type WithImporting = { [IMPORTING]?: string };

/** Throws when `what` (serveHttp, serveOutlastStdio) is called by a module `outlast serve` is importing. */
export function refuseServingDuringServeImport(what: string): void {
  const path = (globalThis as WithImporting)[IMPORTING];
  if (path === undefined) return;
  throw new Error(
    `${path} calls ${what}() itself, so it serves itself: run it with \`node ${path}\`, or drop that call and export ` +
      '`outlast` and `serverInfo` for `outlast serve` to serve (it then takes --port, --host, --bearer, --stdio and the other front flags)',
  );
}

function isOutlast(v: unknown): v is Outlast {
  if (v instanceof Outlast) return true;
  // Another copy of this package (an app's own install beside a global CLI) makes instances of another class.
  const o = v as { tool?: unknown; attachForFront?: unknown; runtime?: unknown } | null;
  return typeof o === 'object' && o !== null && typeof o.tool === 'function' && typeof o.attachForFront === 'function' && typeof o.runtime === 'object';
}

function isInfo(v: unknown): v is Implementation {
  const i = v as { name?: unknown; version?: unknown } | null;
  return typeof i === 'object' && i !== null && typeof i.name === 'string' && typeof i.version === 'string';
}

/** Imports `path` (relative to the working directory) and recognises its shape; throws naming the accepted shapes. */
export async function importServedModule(path: string): Promise<ServedModule> {
  let loaded: Record<string, unknown>;
  const g = globalThis as WithImporting;
  g[IMPORTING] = path;
  try {
    loaded = (await import(pathToFileURL(resolve(path)).href)) as Record<string, unknown>;
  } catch (e) {
    const message = (e as Error).message ?? String(e);
    if (/calls serve\w*\(\) itself/.test(message)) throw new Error(message);
    const ts = /\.(c|m)?tsx?$/.test(path) && /Unknown file extension/.test(message);
    throw new Error(
      ts
        ? `cannot load ${path}: this Node does not run TypeScript; serve it through tsx: \`npx --yes tsx node_modules/outlast/bin/outlast.js serve ${path}\`, or compile it first`
        : `cannot load ${path}: ${message}`,
    );
  } finally {
    delete g[IMPORTING];
  }
  const exported = (loaded.default ?? undefined) as Record<string, unknown> | undefined;
  const outlast = isOutlast(loaded.outlast) ? loaded.outlast : isOutlast(exported) ? exported : isOutlast(exported?.outlast) ? exported.outlast : undefined;
  if (outlast) {
    const from = isOutlast(loaded.outlast) || isOutlast(exported) ? loaded : exported!;
    const serverInfo = from.serverInfo;
    const createServer = from.createServer;
    if (serverInfo !== undefined && !isInfo(serverInfo)) throw new Error(`${path} exports serverInfo, but not as { name, version } strings: ${JSON.stringify(serverInfo)}`);
    if (createServer !== undefined && typeof createServer !== 'function') throw new Error(`${path} exports createServer, but not as a function (one that returns a new McpServer for each request)`);
    if (serverInfo === undefined && createServer === undefined) {
      throw new Error(`${path} exports an Outlast but no \`serverInfo\`: add \`export const serverInfo = { name: 'my-server', version: '1.0.0' }\` (what server/discover reports), or \`createServer\` (a function returning an McpServer)`);
    }
    return { kind: 'outlast', outlast, serverInfo: serverInfo as Implementation | undefined, createServer: createServer as ServerFactory | undefined };
  }
  const mod = (exported ?? loaded) as unknown as OutlastServerModule;
  if (mod && typeof mod === 'object' && isInfo(mod.info)) return { kind: 'definition', module: mod };
  const names = Object.keys(loaded);
  throw new Error(`${path} exports ${names.length ? names.map((n) => `\`${n}\``).join(', ') : 'nothing'}, none of what it needs: ${ACCEPTED_SHAPES}`);
}
