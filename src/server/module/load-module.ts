/**
 * A server module (written with `defineServer`) mounted by any front: what `outlast serve MODULE` does before it
 * listens. Loads the module, makes the store and the `Outlast`, runs the module's `setup`, and returns the
 * per-request factory with the front's options (the module's `serverInfo`, so the direct path is on).
 */
import type { Implementation } from '@modelcontextprotocol/server';
import type { TaskStore } from '../../store/types.js';
import { storeFromUrl } from '../../store/url.js';
import { Outlast, type OutlastOptions } from '../outlast.js';
import { moduleFactory, type OutlastServerModule } from './module.js';
import { importServedModule } from './served-module.js';
import type { HandleOptions } from '../no-tasks/handles.js';
import type { OutlastHandlerOptions, ServerFactory } from '../front/index.js';

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
  const served = await importServedModule(path);
  if (served.kind === 'outlast') {
    throw new Error(`${path} makes its own Outlast (it exports \`outlast\`), and loadServerModule makes one from its options: serve the module's \`outlast\` with serveHttp or outlastHandler instead`);
  }
  return mountDefinedModule(served.module, options);
}

/** A `defineServer` module's Outlast (made with `options`, `setup` run) and per-request factory. */
export async function mountDefinedModule(mod: OutlastServerModule, options: LoadServerModuleOptions): Promise<LoadedServerModule> {
  const { store, handles: wanted, ...outlastOptions } = options;
  const fromModule = mod.handles === true ? {} : mod.handles || undefined;
  const handles = wanted === false ? undefined : wanted !== undefined ? { ...fromModule, ...(wanted === true ? {} : wanted) } : fromModule;
  const outlast = new Outlast({ ...outlastOptions, store: typeof store === 'string' ? storeFromUrl(store) : store, ...(handles ? { handles } : {}) });
  await mod.setup?.(outlast);
  const factory = moduleFactory(mod, () => outlast.notifier());
  return { outlast, factory, options: { serverInfo: mod.info, handles }, module: mod };
}
