/**
 * Who a request is bound to. With credentials: the principal they name (Outlast's bearer and OAuth fronts put it in
 * `extra.principal`; an app's own authentication names the person in `extra.sub`, or the app's `principalOf` does),
 * never the OAuth client, which one hosted app shares among all its users. Without credentials: `anonymous`, kept
 * apart per session where the wire has one. A 2025-11-25 client gets an unguessable `Mcp-Session-Id` at `initialize`
 * and its tasks are bound to it (`anonymous:<digest>`, so the principal the store, logs and links carry is no
 * credential). The 2026-07-28 wire has no session: its callers without credentials share `anonymous`, reach a task
 * only by its unguessable id, and are shown no list. On stdio one connection is one process: `anonymous`.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { AuthInfo } from '@modelcontextprotocol/server';

/** The principal of a caller without credentials and without a session. */
export const ANONYMOUS = 'anonymous';

/** A principal could not be named for a request that carries credentials (the front answers a JSON-RPC error). */
export class PrincipalError extends Error {}

export const NO_SUBJECT =
  "This request's AuthInfo names no person: set extra.sub (the token's subject) in your authentication, or pass principalOf to new Outlast({ principalOf }). " +
  'Tasks are never bound to authInfo.clientId: one OAuth client serves many people (docs/existing-app.md#who-owns-a-task).';

/** Whether a principal is one Outlast gives callers without credentials (shared, or one session's). */
export function isAnonymousPrincipal(principal: string): boolean {
  return principal === ANONYMOUS || principal.startsWith(`${ANONYMOUS}:`);
}

/**
 * The default `principalOf`: `extra.principal` (Outlast's own fronts), else `extra.sub` (the token's subject, as an
 * app's OAuth verifier puts it); neither is a PrincipalError, never the client id. No credentials: `anonymous`.
 */
export function defaultPrincipalOf(authInfo: AuthInfo | undefined): string {
  if (authInfo === undefined) return ANONYMOUS;
  const extra = authInfo.extra as { principal?: unknown; sub?: unknown } | undefined;
  if (typeof extra?.principal === 'string' && extra.principal) return extra.principal;
  if (typeof extra?.sub === 'string' && extra.sub) {
    if (isAnonymousPrincipal(extra.sub)) throw new PrincipalError(`The token's subject "${extra.sub.slice(0, 100)}" is the principal of callers without credentials; pass principalOf to new Outlast({ principalOf }) to name it otherwise`);
    return extra.sub;
  }
  throw new PrincipalError(NO_SUBJECT);
}

/** The session a request names (`Mcp-Session-Id`), if any. */
export function sessionIdOf(headers: { get(name: string): string | null } | undefined): string | undefined {
  return headers?.get('mcp-session-id') || undefined;
}

/** The Mcp-Session-Id the front gives a 2025-11-25 client without credentials at `initialize`. */
export function newSessionId(): string {
  return `outlast.session.${randomUUID()}`;
}

/** A caller without credentials: its session's principal (a digest: the session id itself is the caller's secret),
 *  or the shared `anonymous` without one. */
export function anonymousPrincipal(sessionId: string | undefined): string {
  if (!sessionId) return ANONYMOUS;
  return `${ANONYMOUS}:${createHash('sha256').update(sessionId).digest('base64url').slice(0, 22)}`;
}

/** Over HTTP, a caller with neither credentials nor a session shares its principal with every such caller: it may
 *  reach a task by its id, and is shown no list. */
export function sharesPrincipal(authInfo: AuthInfo | undefined, sessionId: string | undefined): boolean {
  return authInfo === undefined && !sessionId;
}

/** What a caller that shares `anonymous` is told when it asks for a list. */
export function sharedListRefused(what: string): string {
  return `${what} needs credentials or a session: callers without either share one principal (anonymous), so they reach a task only by its id. ` +
    'Initialize first (the Mcp-Session-Id answered binds your tasks to you), or send credentials';
}
