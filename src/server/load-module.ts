/**
 * A server module (written with `defineServer`) mounted by any front: what `outlast serve MODULE` does before it
 * listens. Loads the module, makes the store and the `Outlast`, runs the module's `setup`, and returns the
 * per-request factory with the front's options (the module's `serverInfo`, so the direct path is on).
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Implementation } from '@modelcontextprotocol/server';
import type { TaskStore } from '../store/types.js';
import { storeFromUrl } from '../store/url.js';
import { Outlast, type OutlastOptions } from './outlast.js';
import { moduleFactory, type OutlastServerModule } from './module.js';
import type { HandleOptions } from './handles.js';
import type { OutlastHandlerOptions, ServerFactory } from './front/index.js';

export interface LoadServerModuleOptions extends Omit<OutlastOptions, 'store' | 'handles'> {
  /** A TaskStore (e.g. `new SqliteTaskStore(file)`), or a URL as `--store` takes: sqlite:PATH, postgres://… */
  store: TaskStore | string;
  /** false: no handles whatever the module says; an object or true: the module's handle options, overridden. */
  handles?: boolean | HandleOptions;
}

export interface LoadedServerModule {
  outlast: Outlast;
  factory: ServerFactory;
  /** For `outlastHandler` or `serveHttp`: the module's identity (the direct path) and the handles it runs with. */
  options: OutlastHandlerOptions & { serverInfo: Implementation; handles: HandleOptions | undefined };
  module: OutlastServerModule;
}

/** Loads `path` (a JS module whose default export is `defineServer({...})`), relative to the working directory. */
export async function loadServerModule(path: string, options: LoadServerModuleOptions): Promise<LoadedServerModule> {
  let mod: OutlastServerModule;
  try {
    const loaded = (await import(pathToFileURL(resolve(path)).href)) as { default?: OutlastServerModule } & OutlastServerModule;
    mod = loaded.default ?? loaded;
  } catch (e) {
    throw new Error(`cannot load ${path}: ${(e as Error).message}`);
  }
  if (!mod || typeof mod !== 'object' || !mod.info) throw new Error(`${path} must default-export defineServer({ info, setup, register })`);
  const { store, handles: wanted, ...outlastOptions } = options;
  const fromModule = mod.handles === true ? {} : mod.handles || undefined;
  const handles = wanted === false ? undefined : wanted !== undefined ? { ...fromModule, ...(wanted === true ? {} : wanted) } : fromModule;
  const outlast = new Outlast({ ...outlastOptions, store: typeof store === 'string' ? storeFromUrl(store) : store, ...(handles ? { handles } : {}) });
  await mod.setup?.(outlast);
  const factory = moduleFactory(mod, () => outlast.notifier());
  return { outlast, factory, options: { serverInfo: mod.info, handles }, module: mod };
}
