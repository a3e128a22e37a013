/**
 * The ids of calls on the direct path (direct-call.ts) and the calls Outlast's tools/call declined there: apart,
 * so Outlast's tools/call (outlast.ts) can tell and decline a direct call without importing the path that holds it.
 */

const ID_PREFIX = 'outlast-direct:';
let nextId = 0;
/** Ids whose call Outlast's tools/call declined (it needs the per-request path); read once, by the dispatcher. */
const declined = new Set<string>();

/** A fresh id for a request on the direct path (the client's own id is restored on the answer). */
export function newDirectCallId(): string {
  return `${ID_PREFIX}${++nextId}`;
}

/** Whether a request in the SDK's dispatch came through this path. */
export function isDirectCall(id: unknown): boolean {
  return typeof id === 'string' && id.startsWith(ID_PREFIX);
}

/** Marks a direct call as declined and returns the error that ends its dispatch (its answer is never sent). */
export function declineDirectCall(id: unknown): Error {
  declined.add(id as string);
  return new Error('outlast: this call needs the per-request path');
}

/** Whether the call with this id was declined; forgets it. */
export function takeDeclined(id: string): boolean {
  return declined.delete(id);
}
