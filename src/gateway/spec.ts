/**
 * What an upstream is (its spec, as a config file or flag gives it) and what a call that leases one answers for it:
 * apart from upstream.ts, so secrets.ts and tasks-extension.ts, which upstream.ts uses, can name them.
 */
import type { JsonObject } from '../protocol/index.js';

/** `secrets`: values that must never be shown (what each `${VAR}` of a config file became), on top of those the
 *  spec's own fields hold (secrets.ts). */
export type UpstreamSpec =
  | { kind: 'stdio'; name: string; command: string; args: string[]; env?: Record<string, string>; cwd?: string; secrets?: string[] }
  | { kind: 'http'; name: string; url: string; headers?: Record<string, string>; oauth?: UpstreamOAuth; secrets?: string[] };

/** OAuth client credentials toward an HTTP upstream (RFC 6749 §4.4, `client_secret_basic`), through the SDK's
 *  ClientCredentialsProvider: it finds the authorization server from the upstream's protected-resource metadata, gets
 *  a token for the upstream (with `resource`), and gets a new one when the upstream answers 401. */
export interface UpstreamOAuth {
  clientId: string;
  clientSecret: string;
  /** The authorization server the credentials belong to: they are sent to no other. */
  issuer: string;
  scope?: string;
}

/** What a call that leases the connection answers for the upstream: its questions, while the call runs. */
export interface CallRelay {
  elicit(params: JsonObject, signal: AbortSignal): Promise<JsonObject>;
  sample(params: JsonObject, signal: AbortSignal): Promise<JsonObject>;
  /** A log message the upstream sent during the call. */
  log(params: JsonObject): void;
}
