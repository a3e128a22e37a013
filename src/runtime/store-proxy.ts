/** A store with some of its calls replaced (observed, bounded), every other call passing through bound to it. */
import type { TaskStore } from '../store/types.js';

/** What replaces a call: given the store, the function to call instead. */
export type StoreWrappers = Partial<Record<keyof TaskStore, (target: TaskStore) => unknown>>;

/** The store behind a proxy that answers `wrap`'s calls with their replacement (each made once). */
export function wrapStore(store: TaskStore, wrap: StoreWrappers): TaskStore {
  const cache = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      let f = cache.get(prop);
      if (f) return f;
      const w = wrap[prop as keyof TaskStore];
      const v = Reflect.get(target, prop, target);
      if (!w && typeof v !== 'function') return v;
      cache.set(prop, (f = w ? w(target) : (v as (...a: unknown[]) => unknown).bind(target)));
      return f;
    },
  });
}
