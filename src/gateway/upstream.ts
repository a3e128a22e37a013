/**
 * One connection to an upstream MCP server (a stdio process, or a Streamable HTTP session) through the official SDK
 * client. It declares elicitation and sampling, so the upstream may ask during a call; whoever leases the connection
 * (one call at a time, see pool.ts) receives those requests through `relay`. A connection that breaks (its process
 * ended, it wrote what is not JSON-RPC, its session failed) says why in `broken`, and is never used again.
 */
import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport, type Transport } from '@modelcontextprotocol/client';
import * as z from 'zod';
import { basename } from 'node:path';
import { StdioProcess } from '../client/stdio-process.js';
import { SERVER_INFO_META, type JsonObject } from '../protocol/index.js';
import type { Logger } from '../runtime/types.js';
import type { TaskClient } from '../client/index.js';
import { openTasksExtension } from './tasks-extension.js';
import { redactorOf, upstreamLabel } from './secrets.js';
import type { CallRelay, UpstreamSpec } from './spec.js';

export type { CallRelay, UpstreamOAuth, UpstreamSpec } from './spec.js';

/** A Streamable HTTP session of an upstream (2025-11-25), as another process needs it to speak in it again. */
export interface UpstreamSession {
  sessionId: string;
  protocolVersion: string;
}

export interface UpstreamEvents {
  /** The upstream said its tool (prompt, resource) list changed. */
  toolsChanged(): void;
  promptsChanged(): void;
  resourcesChanged(): void;
  log: Logger;
}

/** Any result object: an upstream's answer is passed on as it is (the gateway's own checks are elsewhere). */
export const ANY_RESULT = z.looseObject({});

/** An upstream's answer, to be passed on as the gateway's: without the upstream's server identity (2026-07-28 puts it
 *  in every result's `_meta`), so that the gateway's own is stamped on it. */
export function asGatewayResult(result: JsonObject): JsonObject {
  const meta = result._meta as JsonObject | undefined;
  if (!meta || typeof meta !== 'object' || !(SERVER_INFO_META in meta)) return result;
  const { [SERVER_INFO_META]: _upstream, ...rest } = meta;
  const { _meta: _m, ...body } = result;
  return Object.keys(rest).length ? { ...body, _meta: rest } : body;
}

/** The SDK's own progress note when it answers an MRTR round (`Fulfilling input required by 'tools/call' (round 1)`),
 *  given to the call's `onprogress` as if the upstream had sent it: not the upstream's progress. */
export function isInputRoundNote(p: JsonObject): boolean {
  return p.total === undefined && typeof p.message === 'string' && /^Fulfilling input required by '[^']+' \(round \d+\)$/.test(p.message);
}

/** Which revision a connection speaks: a stdio upstream is asked with `server/discover` (2026-07-28 when it offers
 *  it), an HTTP one speaks 2025-11-25 here (its 2026-07-28 Tasks extension goes through tasks-extension.ts). */
export type UpstreamEra = 'legacy' | 'modern';

/** What the gateway calls itself when it connects upstream. */
const CLIENT_INFO = { name: 'outlast-gateway', version: '1' };
/** After a line on stdout that is not JSON-RPC, how long a proper answer to initialize may still come (a banner is
 *  tolerated; a stream of nothing else is not). */
const GARBAGE_GRACE_MS = 1000;

/** Words for an upstream in messages: its name and program (without its arguments) or URL (without its userinfo,
 *  query and fragment), never a secret (secrets.ts). */
export function describeUpstream(spec: UpstreamSpec): string {
  return upstreamLabel(spec);
}

/** An error's words with its causes' (fetch says only "fetch failed"; why is in its cause: "connect ECONNREFUSED
 *  127.0.0.1:4000", "getaddrinfo ENOTFOUND host"), with each error code named. */
export function withCauses(e: unknown): string {
  const parts: string[] = [];
  let x: unknown = e;
  for (let depth = 0; x !== undefined && x !== null && depth < 6; depth++) {
    const err = x as { message?: unknown; code?: unknown; cause?: unknown; errors?: unknown };
    const errors = Array.isArray(err.errors) ? err.errors : [];
    let m = typeof err.message === 'string' ? err.message : String(x);
    if (typeof err.code === 'string' && !m.includes(err.code)) m = m ? `${m} (${err.code})` : errors.length ? '' : err.code;
    if (m && !parts.includes(m)) parts.push(m);
    x = err.cause ?? errors[0];
  }
  return parts.join(': ');
}

export class UpstreamConnection {
  /** Set while a call holds the lease: where the upstream's questions go. */
  relay: CallRelay | undefined;
  /** Why this connection can serve no more (undefined while it can). */
  broken: Error | undefined;
  /** Calls go through this when the upstream has the Tasks extension (2026-07-28; tasks-extension.ts). */
  tasks: TaskClient | undefined;
  private constructor(
    readonly spec: UpstreamSpec,
    readonly client: Client,
    private readonly transport: Transport,
    /** The upstream's process, for a stdio upstream. */
    readonly stdio: StdioProcess | undefined,
  ) {}

  /** The revision this connection speaks. */
  get era(): UpstreamEra {
    return this.client.getProtocolEra() === 'modern' ? 'modern' : 'legacy';
  }

  /** The upstream process's id (stdio). */
  get pid(): number | undefined {
    return this.stdio?.pid;
  }

  /** The Streamable HTTP session this connection speaks in, and its protocol version (what `open` needs to join it
   *  again from another process); undefined for stdio or a server that keeps no sessions. */
  get session(): UpstreamSession | undefined {
    if (!(this.transport instanceof StreamableHTTPClientTransport)) return undefined;
    const { sessionId, protocolVersion } = this.transport;
    return sessionId && protocolVersion ? { sessionId, protocolVersion } : undefined;
  }

  /**
   * Starts the process (or session) and initializes; rejects with a reason that names the upstream. With `join`, an
   * HTTP upstream's existing session is spoken in again instead (no initialize: the upstream knows it already). A
   * stdio upstream is probed for 2026-07-28 unless `era` says what an earlier connection to it learned.
   */
  static async open(spec: UpstreamSpec, events: UpstreamEvents, connectTimeoutMs: number, join?: UpstreamSession, era?: UpstreamEra): Promise<UpstreamConnection> {
    // On 2026-07-28 an upstream asks in `input_required` results (MRTR), which the SDK answers through the same
    // elicitation and sampling handlers as 2025-11-25's requests (below), then sends the call again.
    // The probe may take the whole connect timeout: a server still starting (an `npx -y` download) is not taken for a
    // 2025-11-25 one, a verdict kept for its later connections; only one that never answers it pays that wait, once.
    const negotiation = spec.kind === 'stdio' ? { versionNegotiation: { mode: 'auto' as const } } : {};
    const client = new Client(CLIENT_INFO, { capabilities: { elicitation: { form: {}, url: {} }, sampling: {} }, ...negotiation });
    const redact = redactorOf(spec);
    let connected = false;
    let onGarbage: (line: string) => void = () => {};
    const stdio =
      spec.kind === 'stdio'
        ? new StdioProcess({
            command: spec.command,
            args: spec.args,
            ...(spec.env ? { env: spec.env } : {}),
            ...(spec.cwd ? { cwd: spec.cwd } : {}),
            shownAs: basename(spec.command),
            // Its stderr goes to the gateway's log, a line at a time, prefixed by the upstream's name, its secrets
            // redacted; a caller sees only the line that says why it failed (describeEnd), redacted too.
            onStderrLine: (line) => {
              if (line.trim()) events.log.info(`[${spec.name}] ${redact(line)}`);
            },
            onGarbage: (line) => onGarbage(line),
          })
        : undefined;
    const transport: Transport =
      spec.kind === 'stdio'
        ? stdio!
        : new StreamableHTTPClientTransport(new URL(spec.url), {
            requestInit: { headers: spec.headers ?? {} },
            ...(join ? { sessionId: join.sessionId, protocolVersion: join.protocolVersion } : {}),
            ...(spec.oauth
              ? { authProvider: new ClientCredentialsProvider({ clientId: spec.oauth.clientId, clientSecret: spec.oauth.clientSecret, expectedIssuer: spec.oauth.issuer, ...(spec.oauth.scope ? { scope: spec.oauth.scope } : {}) }) }
              : {}),
          });
    const conn = new UpstreamConnection(spec, client, transport, stdio);
    let failOpen: (e: Error) => void = () => {};
    const openFailed = new Promise<never>((_, reject) => (failOpen = reject));
    openFailed.catch(() => undefined);
    onGarbage = (line) => {
      events.log.warn(`[${spec.name}] stdout, not JSON-RPC: ${redact(line.slice(0, 300))}`);
      if (connected) return;
      const garbage = new Error(`${describeUpstream(spec)} wrote something that is not JSON-RPC on its stdout ("${redact(line.slice(0, 200))}") and no answer to initialize`);
      setTimeout(() => {
        if (connected) return;
        conn.breakWith(garbage);
        failOpen(garbage);
      }, GARBAGE_GRACE_MS).unref();
    };
    client.onerror = (e) => events.log.warn(`[${spec.name}] ${redact(withCauses(e))}`);
    client.onclose = () => {
      const how = conn.stdio ? conn.stdio.describeEnd({ stderr: 'cause', redact }) : 'ended its connection';
      conn.breakWith(new Error(`${describeUpstream(spec)}${conn.pidText()} ${how}`));
      // A process that ended says more than the SDK's "connection closed"; an HTTP connect fails with its own cause.
      if (conn.stdio) failOpen(conn.broken!);
    };
    client.setNotificationHandler('notifications/tools/list_changed', () => events.toolsChanged());
    client.setNotificationHandler('notifications/prompts/list_changed', () => events.promptsChanged());
    client.setNotificationHandler('notifications/resources/list_changed', () => events.resourcesChanged());
    client.setNotificationHandler('notifications/message', (n) => conn.relay?.log(n.params as unknown as JsonObject));
    client.setRequestHandler('elicitation/create', async (req, ctx) => conn.answer('elicit', req.params as unknown as JsonObject, ctx.mcpReq.signal) as never);
    client.setRequestHandler('sampling/createMessage', async (req, ctx) => conn.answer('sample', req.params as unknown as JsonObject, ctx.mcpReq.signal) as never);
    try {
      const connecting = client.connect(transport, { timeout: connectTimeoutMs, ...(era === 'legacy' ? { prior: { kind: 'legacy' as const } } : {}) });
      void connecting.catch(() => undefined);
      await Promise.race([connecting, openFailed]);
      connected = true;
      if (!join) conn.tasks = await openTasksExtension(spec, () => conn.relay);
      if (conn.tasks) events.log.debug(`${describeUpstream(spec)} has the Tasks extension (2026-07-28): calls on this connection go through it`);
    } catch (e) {
      // What broke it first (garbage, an early exit) says more than the SDK's "connection closed"; fetch's "fetch
      // failed" says why in its cause.
      const why = conn.broken && conn.stdio ? conn.broken.message : withCauses(e);
      await conn.close(); // for a stdio upstream: until its process is gone and its stderr read
      const cause = conn.stdio?.stderrCause;
      const said = cause && !why.includes('stderr') && !why.startsWith('upstream') ? `; on stderr: ${cause}` : '';
      throw new Error(redact(why.startsWith('upstream') ? why : `${describeUpstream(spec)} could not start: ${why}${said}`));
    }
    return conn;
  }

  private pidText(): string {
    return this.pid ? ` (pid ${this.pid})` : '';
  }

  private breakWith(e: Error): void {
    this.broken ??= e;
  }

  private async answer(kind: 'elicit' | 'sample', params: JsonObject, signal: AbortSignal): Promise<JsonObject> {
    const relay = this.relay;
    // Association is by lease: a question with no call in flight on this connection belongs to nobody.
    if (!relay) throw new Error(`The gateway has no call in flight on this connection to answer ${kind === 'elicit' ? 'elicitation/create' : 'sampling/createMessage'}`);
    return kind === 'elicit' ? relay.elicit(params, signal) : relay.sample(params, signal);
  }

  /** Marks it unusable (e.g. a call on it was cancelled or timed out: what it may still send belongs to nobody). */
  retire(why: string): void {
    this.breakWith(new Error(why));
  }

  async close(): Promise<void> {
    this.breakWith(new Error(`${describeUpstream(this.spec)}: the connection was closed`));
    try {
      if (this.transport instanceof StreamableHTTPClientTransport) await this.transport.terminateSession().catch(() => undefined);
      await this.client.close();
      await this.tasks?.close();
    } catch {
      /* already closed */
    }
  }
}
