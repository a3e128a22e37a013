/** `--store URL` → a TaskStore (src/store/url.ts); `fail` prints the usage error, naming the flag, and exits. */
import { storeFromUrl as storeOf } from '../store/url.js';
import type { TaskStore } from '../store/types.js';

export function storeFromUrl(url: string, fail: (message: string) => never): TaskStore {
  try {
    return storeOf(url);
  } catch (e) {
    fail((e as Error).message.replace(/^unsupported store/, 'unsupported --store'));
  }
}
