/** `--store URL` → a TaskStore (sqlite:PATH or postgres://…); `fail` prints the usage error and exits. */
import { sqliteStoreFromUrl } from '../store/sqlite/index.js';
import { postgresStoreFromUrl } from '../store/postgres/index.js';
import type { TaskStore } from '../store/types.js';

export function storeFromUrl(url: string, fail: (message: string) => never): TaskStore {
  if (url.startsWith('sqlite:')) return sqliteStoreFromUrl(url);
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    try {
      return postgresStoreFromUrl(url);
    } catch (e) {
      fail((e as Error).message);
    }
  }
  fail(`unsupported --store "${url}": use sqlite:PATH or postgres://USER@HOST:PORT/DATABASE?schema=NAME`);
}
