/** `--store URL` → a TaskStore (src/store/url.ts), `--bus URL` → its SignalBus; `fail` prints the usage error, naming the flag, and exits. */
import { storeFromUrl as storeOf } from '../store/url.js';
import { signalBusFromUrl } from '../store/bus-url.js';
import type { SignalBus } from '../store/local-bus.js';
import type { TaskStore } from '../store/types.js';

export function storeFromUrl(url: string, fail: (message: string) => never): TaskStore {
  try {
    return storeOf(url);
  } catch (e) {
    fail((e as Error).message.replace(/^unsupported store/, 'unsupported --store'));
  }
}

/** `--bus URL` → the SignalBus of the store's replicas (src/store/bus-url.ts). */
export function busFromUrl(url: string, store: TaskStore, onError: (message: string) => void, fail: (message: string) => never): SignalBus {
  try {
    return signalBusFromUrl(url, store, onError);
  } catch (e) {
    fail((e as Error).message.replace(/^unsupported bus/, 'unsupported --bus'));
  }
}
