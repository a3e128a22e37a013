/** A store URL as `--store` takes it (sqlite:PATH or postgres://…) → a TaskStore; a URL it cannot serve throws, saying why. */
import { sqliteStoreFromUrl } from './sqlite/index.js';
import { postgresStoreFromUrl } from './postgres/index.js';
import type { TaskStore } from './types.js';

export function storeFromUrl(url: string): TaskStore {
  if (url.startsWith('sqlite:')) return sqliteStoreFromUrl(url);
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) return postgresStoreFromUrl(url);
  throw new Error(`unsupported store "${url}": use sqlite:PATH or postgres://USER@HOST:PORT/DATABASE?schema=NAME`);
}
