/**
 * A raw JSON-RPC dispatcher over the official SDK v2 client transport (`StreamableHTTPClientTransport`).
 *
 * Why not the SDK's `Client`: its 2026-07-28 codec rejects `resultType: "task"` before any schema runs
 * (sdk-notes.md §6), so a client that declares the Tasks extension cannot receive a task through it. The
 * transport itself is fine: it frames the POST, sets `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` from
 * the body (so `tasks/*` carry `Mcp-Name: <taskId>`), handles bearer/OAuth auth and parses SSE. This class adds
 * what the `Client` would: the per-request `_meta` envelope, an id → promise map, timeouts, classification of
 * failures (JSON-RPC error, rate limit with Retry-After, transport failure), long-lived streams for
 * `subscriptions/listen`, request counting, per-request headers (SEP-2243 `Mcp-Param-*`), and one retry when the
 * server refuses the protocol version but lists one this client speaks (-32022), and a CLIENT span per request whose
 * trace context goes out in `_meta` (request-spans.ts).
 *
 * The same dispatcher runs over any other carrier given as a MessageChannel (stdio: stdio-transport.ts), where every
 * answer comes back as a message and the end of the carrier fails what is pending.
 *
 * With `protocolVersion: '2025-11-25'` it opens a session instead (`initialize`; over HTTP also the transport's
 * session id and GET stream) and sends requests without the 2026 envelope; requests the server sends on that session
 * (elicitation, sampling, `tasks/*` of the client's own tasks) go to `onServerRequest` and its answer goes back on
 * the same carrier.
 */
import { StreamableHTTPClientTransport, SdkHttpError, UnauthorizedError, type AuthProvider } from '@modelcontextprotocol/client';
import {
  CLIENT_CAPABILITIES_META,
  ErrorCode,
  CLIENT_INFO_META,
  PROTOCOL_VERSION,
  PROTOCOL_VERSION_META,
  RATE_LIMITED_CODE,
  SUBSCRIPTION_ID_META,
  type JsonObject,
  type JsonRpcErrorObject,
} from '../protocol/index.js';
import { LEGACY_PROTOCOL_VERSION } from '../protocol/legacy.js';
import { RateLimitedError, RpcError, TransportError, UnsupportedVersionError, neverSent } from './errors.js';
import { startClientRequestSpan, type ClientRequestSpan } from './request-spans.js';

export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * A message carrier other than HTTP (stdio-transport.ts): requests go out with send(), every answer and notification
 * comes back through onmessage, and onclose reports the carrier's end with the error every pending request gets.
 */
export interface MessageChannel {
  /** What the journal and error messages name the server by (for stdio: the command, args and cwd). */
  readonly target: string;
  /** Rejects with a TransportError when the carrier cannot be opened (a command that cannot start). */
  start(): Promise<void>;
  /** Rejects with a TransportError once the carrier is gone. */
  send(message: JsonObject): Promise<void>;
  close(): Promise<void>;
  onmessage?: (message: JsonObject) => void;
  onclose?: (error: TransportError) => void;
}

export interface DispatcherOptions {
  /** The server's Streamable HTTP endpoint; or give `channel` instead. */
  url?: string | URL;
  /** Another carrier (stdio); the HTTP options below (bearer, authProvider, fetch) do not apply to it. */
  channel?: MessageChannel;
  /** A static bearer token (sent as `Authorization: Bearer …`). */
  bearer?: string;
  /** Or any SDK auth provider (OAuth included); wins over `bearer`. */
  authProvider?: AuthProvider;
  /** Custom fetch (tests, proxies). */
  fetch?: FetchLike;
  clientInfo?: { name: string; version: string };
  /** The client capabilities declared on every request. */
  capabilities: JsonObject;
  /** Per-request timeout for requests that are not `tools/call`, and for a listen stream's response headers
   *  (default 30 000 ms). */
  requestTimeoutMs?: number;
  /** Deadline of one `tools/call` round (default 60 000 ms; 0: none). The server answers a task-capable call
   *  within its inline budget, so a call that gets no answer meets a wedged server; TaskClient retries it with the
   *  same idempotency key. */
  callTimeoutMs?: number;
  /** '2026-07-28' (default: stateless, the `_meta` envelope on every request) or '2025-11-25' (a session opened
   *  with `initialize`, for servers of that revision). */
  protocolVersion?: typeof PROTOCOL_VERSION | typeof LEGACY_PROTOCOL_VERSION;
  /** Answers a request the server sends (2025-11-25 sessions); throw an RpcError for a JSON-RPC error. Without it
   *  every such request is answered -32601. */
  onServerRequest?: ServerRequestHandler;
  /** Hears the notifications the server sends on a 2025-11-25 session (e.g. `notifications/cancelled`). */
  onServerNotification?: (method: string, params: JsonObject) => void;
}

/** Thrown by a ServerRequestHandler for a request the server cancelled: no answer is sent (the spec's rule). */
export class RequestCancelledByServer extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'RequestCancelledByServer';
  }
}

/** What answers a server→client request: its result, or an RpcError thrown. */
export type ServerRequestHandler = (method: string, params: JsonObject, id: string | number) => Promise<JsonObject>;

export interface RequestOptions {
  signal?: AbortSignal;
  /** Extra `_meta` entries (e.g. the idempotency key). */
  meta?: JsonObject;
  /** Override the timeout (0 = none). */
  timeoutMs?: number;
  /** Extra HTTP headers for this request (`Mcp-Param-*`); the transport keeps its own standard and auth headers. */
  headers?: Record<string, string>;
}

/** Requests sent, counted as HTTP POSTs leave (retries included). */
export interface RequestStats {
  total: number;
  byMethod: Record<string, number>;
}

interface Pending {
  resolve(result: JsonObject): void;
  reject(e: unknown): void;
}

export interface StreamHandlers {
  /** A notification carrying this stream's subscription id. */
  onNotification(message: { method: string; params?: JsonObject }): void;
}

export interface OpenStream {
  readonly id: number;
  /** Resolves when the stream ends: `result` (the server ended it properly), `cut` (dropped without a
   *  result), `closed` (we closed it); rejects with an RpcError if the server answered with an error. */
  readonly ended: Promise<'result' | 'cut' | 'closed'>;
  close(): void;
}

type JsonRpcMessage = { jsonrpc: '2.0'; id?: string | number; method?: string; params?: JsonObject; result?: JsonObject; error?: JsonRpcErrorObject };

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_CALL_TIMEOUT_MS = 60_000;
/** The protocol versions this client speaks, preferred first. */
export const SPOKEN_VERSIONS: readonly string[] = [PROTOCOL_VERSION];

function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  const s = Number(v);
  if (Number.isFinite(s) && s >= 0) return s * 1000;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : undefined;
}

function networkCause(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (e as Error)?.message ?? String(e);
}

export class RawDispatcher {
  /** The HTTP endpoint (undefined over a channel). */
  readonly url: URL | undefined;
  /** What the server is named by: the URL, or the channel's target. */
  readonly target: string;
  readonly stats: RequestStats = { total: 0, byMethod: {} };
  private readonly transport: StreamableHTTPClientTransport | undefined;
  private readonly channel: MessageChannel | undefined;
  private readonly pending = new Map<number, Pending>();
  private readonly streams = new Map<number, StreamHandlers & { end(how: 'result' | 'cut', error?: unknown): void }>();
  /** Per request id: Retry-After of a 429, and whether the answer is an SSE stream. */
  private readonly seen = new Map<number, { retryAfterMs?: number; sse?: boolean }>();
  private readonly meta: JsonObject;
  private readonly timeoutMs: number;
  private readonly callTimeoutMs: number;
  private nextId = 1;
  private started: Promise<void> | undefined;
  /** The HTTP transport's or the channel's start, once. */
  private carrierStarted: Promise<void> | undefined;
  private closed = false;
  /** The 2025-11-25 session's settings (undefined: the stateless 2026-07-28 wire). */
  private readonly session:
    | { capabilities: JsonObject; clientInfo: JsonObject; onServerRequest?: ServerRequestHandler; onServerNotification?: (method: string, params: JsonObject) => void }
    | undefined;

  constructor(options: DispatcherOptions) {
    this.timeoutMs = options.requestTimeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.meta = {
      [PROTOCOL_VERSION_META]: PROTOCOL_VERSION,
      [CLIENT_CAPABILITIES_META]: options.capabilities,
      [CLIENT_INFO_META]: options.clientInfo ?? { name: 'outlast-client', version: '0.1.0' },
    };
    if (options.protocolVersion === LEGACY_PROTOCOL_VERSION) {
      this.session = {
        capabilities: options.capabilities,
        clientInfo: this.meta[CLIENT_INFO_META] as JsonObject,
        ...(options.onServerRequest ? { onServerRequest: options.onServerRequest } : {}),
        ...(options.onServerNotification ? { onServerNotification: options.onServerNotification } : {}),
      };
    } else if (options.protocolVersion !== undefined && options.protocolVersion !== PROTOCOL_VERSION) {
      throw new TypeError(`Unknown protocolVersion "${String(options.protocolVersion)}" (this client speaks ${PROTOCOL_VERSION} and ${LEGACY_PROTOCOL_VERSION})`);
    }
    if (options.channel) {
      if (options.url !== undefined) throw new TypeError('Give the server as a url or as a channel (stdio), not both');
      this.channel = options.channel;
      this.target = options.channel.target;
      this.channel.onmessage = (m) => this.onMessage(m as unknown as JsonRpcMessage);
      this.channel.onclose = (error) => this.channelEnded(error);
      return;
    }
    let url: URL;
    try {
      url = new URL(String(options.url));
    } catch {
      throw new TypeError(`Not a URL: "${String(options.url)}" (expected e.g. http://127.0.0.1:3000/mcp)`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`Not an http(s) URL: "${url.href}"`);
    this.url = url;
    this.target = url.href;
    const base = options.fetch ?? fetch;
    const counted: FetchLike = async (u, init) => {
      let id: number | undefined;
      if (init?.method === 'POST' && typeof init.body === 'string') {
        try {
          const m = JSON.parse(init.body) as JsonRpcMessage;
          if (typeof m.id === 'number') id = m.id;
          const method = m.method ?? '?';
          this.stats.total++;
          this.stats.byMethod[method] = (this.stats.byMethod[method] ?? 0) + 1;
        } catch {
          /* not ours */
        }
      }
      const res = await base(u, init);
      if (id !== undefined) {
        const info: { retryAfterMs?: number; sse?: boolean } = {};
        if (res.status === 429) {
          const ra = parseRetryAfter(res.headers.get('retry-after'));
          if (ra !== undefined) info.retryAfterMs = ra;
        }
        info.sse = (res.headers.get('content-type') ?? '').includes('text/event-stream');
        this.seen.set(id, info);
      }
      return res;
    };
    const authProvider = options.authProvider ?? (options.bearer ? { token: async () => options.bearer } : undefined);
    this.transport = new StreamableHTTPClientTransport(url, {
      fetch: counted,
      ...(authProvider ? { authProvider } : {}),
      // Streams are never resumed by the transport: SSE resumability is gone in 2026-07-28, and a cut stream
      // is the status source's business (it falls back to polling).
      reconnectionOptions: { maxReconnectionDelay: 1000, initialReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1, maxRetries: 0 },
    });
    this.transport.onerror = () => undefined; // every failure is reported through the request it belongs to
    this.transport.onmessage = (m) => this.onMessage(m as unknown as JsonRpcMessage);
  }

  /** The `_meta` envelope sent with every request (the transport mirrors its version into `MCP-Protocol-Version`). */
  envelope(extra?: JsonObject, version: string = PROTOCOL_VERSION): JsonObject {
    return { ...this.meta, [PROTOCOL_VERSION_META]: version, ...extra };
  }

  private start(): Promise<void> {
    if (this.closed) return Promise.reject(new TransportError('The client is closed', { retryable: false }));
    if (!this.started && this.session) {
      // A session that could not open is tried again by the next request (the server may not be up yet).
      this.started = this.openSession(this.session).catch((e: unknown) => {
        this.started = undefined;
        throw e;
      });
    }
    return (this.started ??= this.startCarrier());
  }

  /** Starts the HTTP transport or the channel, once (a session opened again reuses it). */
  private startCarrier(): Promise<void> {
    return (this.carrierStarted ??= (this.channel ?? this.transport!).start());
  }

  /** Sends one message that is not a request of ours (a notification, an answer to the server) on the carrier. */
  private post(message: JsonRpcMessage): Promise<void> {
    return this.channel ? this.sendOnChannel(message) : this.transport!.send(message as never);
  }

  /** Sends one message over the channel, counted as an HTTP POST would be. */
  private sendOnChannel(message: JsonRpcMessage): Promise<void> {
    this.stats.total++;
    this.stats.byMethod[message.method ?? '?'] = (this.stats.byMethod[message.method ?? '?'] ?? 0) + 1;
    return this.channel!.send(message as unknown as JsonObject);
  }

  /** The channel ended (the server process exited): what was pending fails with its error, streams are cut. */
  private channelEnded(error: TransportError): void {
    for (const s of [...this.streams.values()]) s.end('cut', error);
    for (const [id, p] of [...this.pending]) {
      this.pending.delete(id);
      p.reject(error);
    }
  }

  /** 2025-11-25: `initialize`, the version header from then on, and `notifications/initialized` (after which the
   *  transport opens its GET stream, where the server's own requests may come). */
  private async openSession(session: NonNullable<RawDispatcher['session']>): Promise<void> {
    await this.startCarrier();
    const params = { protocolVersion: LEGACY_PROTOCOL_VERSION, capabilities: session.capabilities, clientInfo: session.clientInfo };
    const span = startClientRequestSpan('initialize', params, this.url, undefined);
    let result: JsonObject;
    try {
      result = await this.exchange('initialize', params, span.meta ? { meta: span.meta } : {}, LEGACY_PROTOCOL_VERSION, span);
      span.ok(result);
    } catch (e) {
      span.failed(e);
      throw e;
    }
    if (result.protocolVersion !== LEGACY_PROTOCOL_VERSION) {
      throw new TransportError(`initialize: the server at ${this.target} answered protocol version ${JSON.stringify(result.protocolVersion)}; this session speaks ${LEGACY_PROTOCOL_VERSION}`, { retryable: false });
    }
    this.transport?.setProtocolVersion(LEGACY_PROTOCOL_VERSION); // a channel has no headers
    await this.post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  }

  /** Sends a notification (2025-11-25 sessions: e.g. `notifications/tasks/status`). */
  async notify(method: string, params: JsonObject): Promise<void> {
    await this.start();
    await this.post({ jsonrpc: '2.0', method, params });
  }

  /** A request from the server: answered by the handler (or -32601), the answer posted back. */
  private answerServerRequest(m: JsonRpcMessage & { id: string | number; method: string }): void {
    const handler = this.session?.onServerRequest;
    void (async () => {
      let reply: JsonObject;
      try {
        if (!handler) throw new RpcError({ code: ErrorCode.MethodNotFound, message: `This client serves no requests (${m.method})` });
        reply = { jsonrpc: '2.0', id: m.id, result: await handler(m.method, (m.params ?? {}) as JsonObject, m.id) };
      } catch (e) {
        if (e instanceof RequestCancelledByServer) return;
        const error = e instanceof RpcError ? e.toJSON() : { code: ErrorCode.InternalError, message: (e as Error)?.message ?? String(e) };
        reply = { jsonrpc: '2.0', id: m.id, error: error as unknown as JsonObject };
      }
      if (this.closed) return;
      // A lost answer cannot be retried from here: the server's request times out and says so.
      await this.post(reply as unknown as JsonRpcMessage).catch(() => undefined);
    })();
  }

  private onMessage(m: JsonRpcMessage): void {
    if (m.method !== undefined && m.id !== undefined) {
      this.answerServerRequest(m as JsonRpcMessage & { id: string | number; method: string });
      return;
    }
    if (m.method !== undefined && m.id === undefined) {
      const sub = (m.params?._meta as JsonObject | undefined)?.[SUBSCRIPTION_ID_META];
      if (typeof sub === 'number') this.streams.get(sub)?.onNotification(m as { method: string; params?: JsonObject });
      else this.session?.onServerNotification?.(m.method, (m.params ?? {}) as JsonObject);
      return;
    }
    if (typeof m.id !== 'number') return;
    const p = this.pending.get(m.id);
    if (p) {
      this.pending.delete(m.id);
      if (m.error) p.reject(this.toError(m.id, m.error));
      else p.resolve((m.result ?? {}) as JsonObject);
    }
    const s = this.streams.get(m.id);
    if (s) s.end('result', m.error ? this.toError(m.id, m.error) : undefined);
  }

  private toError(id: number, error: JsonRpcErrorObject, httpStatus?: number): RpcError {
    const info = this.seen.get(id);
    if (error.code === RATE_LIMITED_CODE || httpStatus === 429 || info?.retryAfterMs !== undefined) {
      const fromData = (error.data as { retryAfterMs?: unknown } | undefined)?.retryAfterMs;
      const retryAfterMs = Math.max(typeof fromData === 'number' ? fromData : 0, info?.retryAfterMs ?? 0) || 1000;
      return new RateLimitedError(error, retryAfterMs, httpStatus ?? 429);
    }
    return new RpcError(error, httpStatus);
  }

  /** Turns whatever the transport threw into RpcError / RateLimitedError / TransportError. */
  private classify(id: number, e: unknown, method: string): unknown {
    if (e instanceof RpcError || e instanceof TransportError) return e;
    if ((e as Error)?.name === 'AbortError') return e;
    if (e instanceof UnauthorizedError) {
      return new TransportError(`The server at ${this.target} refused the request (HTTP 401): give a valid bearer token (--bearer TOKEN)`, {
        cause: e,
        httpStatus: 401,
        retryable: false,
      });
    }
    if (e instanceof SdkHttpError) {
      const status = e.status;
      const text = (e.data as { text?: unknown } | undefined)?.text;
      if (typeof text === 'string') {
        try {
          const body = JSON.parse(text) as JsonRpcMessage;
          if (body && typeof body === 'object' && body.error && typeof body.error.code === 'number') {
            if (status === 401) {
              return new TransportError(`The server at ${this.target} refused the request (HTTP 401: ${body.error.message}): give a valid bearer token (--bearer TOKEN)`, {
                httpStatus: 401,
                retryable: false,
              });
            }
            if (status >= 500 && status !== 501) return new TransportError(`${method}: HTTP ${status} (${body.error.message})`, { httpStatus: status });
            return this.toError(id, body.error, status);
          }
        } catch {
          /* not JSON */
        }
      }
      if (status === 502 || status === 503 || status === 504 || status === 500 || status === 408) {
        return new TransportError(`${method}: HTTP ${status} from ${this.target}`, { httpStatus: status });
      }
      if (status === 429) return this.toError(id, { code: RATE_LIMITED_CODE, message: 'Too many requests' }, 429);
      return new TransportError(
        status === 404 || status === 405
          ? `No MCP endpoint at ${this.target} (HTTP ${status}); check the URL (Outlast serves /mcp)`
          : `${method}: HTTP ${status} from ${this.target}${typeof text === 'string' && text ? `: ${text.slice(0, 200)}` : ''}`,
        { httpStatus: status, retryable: false, cause: e },
      );
    }
    if (e instanceof TypeError) return new TransportError(`${method}: cannot reach ${this.target} (${networkCause(e)})`, { cause: e });
    return new TransportError(`${method}: ${(e as Error)?.message ?? String(e)}`, { cause: e, retryable: false });
  }

  /**
   * Sends one request and resolves with its result; rejects with RpcError, RateLimitedError or TransportError.
   * A -32022 (UnsupportedProtocolVersion) whose `data.supported` lists a version this client speaks is retried
   * once with it (a new id; the request was refused before anything ran); otherwise, or if that is refused too,
   * it rejects with UnsupportedVersionError naming both sides' versions.
   */
  async request(method: string, params: JsonObject = {}, opts: RequestOptions = {}): Promise<JsonObject> {
    const span = startClientRequestSpan(method, params, this.url, opts.meta);
    const sent = span.meta ? { ...opts, meta: { ...opts.meta, ...span.meta } } : opts;
    let version = PROTOCOL_VERSION;
    try {
      for (let retried = false; ; retried = true) {
        try {
          const result = await this.requestOnce(method, params, sent, version, span);
          span.ok(result);
          return result;
        } catch (e) {
          if (!(e instanceof RpcError) || e.code !== ErrorCode.UnsupportedProtocolVersion) throw e;
          version = this.versionAfterRefusal(e, retried);
        }
      }
    } catch (e) {
      span.failed(e);
      throw e;
    }
  }

  /** The version to retry with after a -32022, or the UnsupportedVersionError to throw. */
  private versionAfterRefusal(e: RpcError, retried: boolean): string {
    const listed = (e.data as { supported?: unknown } | undefined)?.supported;
    const supported = Array.isArray(listed) ? listed.filter((v): v is string => typeof v === 'string') : [];
    const common = SPOKEN_VERSIONS.find((v) => supported.includes(v));
    if (common === undefined || retried) throw new UnsupportedVersionError(this.target, e.toJSON(), supported, SPOKEN_VERSIONS, common !== undefined, e.httpStatus);
    return common;
  }

  private async requestOnce(method: string, params: JsonObject, opts: RequestOptions, version: string, span: ClientRequestSpan): Promise<JsonObject> {
    await this.start();
    if (!this.session) return this.exchange(method, params, opts, version, span);
    try {
      return await this.exchange(method, params, opts, LEGACY_PROTOCOL_VERSION, span);
    } catch (e) {
      if (!(e instanceof TransportError)) throw e;
      if (e.httpStatus === 404) {
        // The server forgot the session (it restarted): the spec says to open a new one; the request is sent again once.
        this.started = undefined;
        await this.start();
        return this.exchange(method, params, opts, LEGACY_PROTOCOL_VERSION, span);
      }
      // That revision has no idempotency key: a call that may have reached the server is not sent again.
      if (method === 'tools/call' && e.retryable && !neverSent(e)) throw new TransportError(e.message, { cause: e, retryable: false, ...(e.httpStatus ? { httpStatus: e.httpStatus } : {}) });
      throw e;
    }
  }

  /** One request on a started transport: a session's carries only the caller's `_meta`, a stateless one the envelope. */
  private async exchange(method: string, params: JsonObject, opts: RequestOptions, version: string, span: ClientRequestSpan): Promise<JsonObject> {
    opts.signal?.throwIfAborted();
    const id = this.nextId++;
    span.attempt(id, version);
    const meta = this.session ? opts.meta : this.envelope(opts.meta, version);
    const message = { jsonrpc: '2.0' as const, id, method, params: { ...params, ...(meta ? { _meta: meta } : {}) } };
    const ctl = new AbortController();
    const timeoutMs = opts.timeoutMs ?? (method === 'tools/call' ? this.callTimeoutMs : this.timeoutMs);
    let timedOut = false;
    const timer = timeoutMs > 0 ? setTimeout(() => ((timedOut = true), ctl.abort()), timeoutMs) : undefined;
    const onAbort = () => ctl.abort(opts.signal!.reason);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      return await new Promise<JsonObject>((resolve, reject) => {
        const fail = (e: unknown) => {
          if (!this.pending.delete(id)) return;
          reject(e);
        };
        this.pending.set(id, { resolve, reject });
        ctl.signal.addEventListener('abort', () =>
          fail(timedOut ? new TransportError(`${method}: no answer within ${timeoutMs} ms`) : (opts.signal?.reason ?? new DOMException('Aborted', 'AbortError'))),
        );
        const sent = this.channel
          ? this.sendOnChannel(message) // the answer comes as a message, or the channel's end fails it
          : this.transport!.send(message as never, {
              requestSignal: ctl.signal,
              ...(opts.headers ? { headers: opts.headers } : {}),
              onRequestStreamEnd: () => fail(new TransportError(`${method}: the response stream ended before the response`)),
            }).then(() => {
              // A JSON answer was delivered before send() resolved; a JSON-less, stream-less answer never comes.
              if (this.pending.has(id) && !this.seen.get(id)?.sse) fail(new TransportError(`${method}: the server sent no response`));
            });
        sent.catch((e) => fail(this.classify(id, e, method)));
      });
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener('abort', onAbort);
      this.seen.delete(id);
    }
  }

  /**
   * Opens a long-lived request whose SSE response carries notifications tagged with its id as subscription id
   * (`subscriptions/listen`). Resolves once the response headers are in; notifications go to `handlers`.
   */
  async openStream(method: string, params: JsonObject, handlers: StreamHandlers): Promise<OpenStream> {
    await this.start();
    const id = this.nextId++;
    const ctl = new AbortController();
    let settle!: (how: 'result' | 'cut' | 'closed', error?: unknown) => void;
    const ended = new Promise<'result' | 'cut' | 'closed'>((resolve, reject) => {
      let done = false;
      settle = (how, error) => {
        if (done) return;
        done = true;
        this.streams.delete(id);
        this.seen.delete(id);
        if (error) reject(error);
        else resolve(how);
      };
    });
    ended.catch(() => undefined); // observed by the caller; never an unhandled rejection
    this.streams.set(id, { onNotification: (m) => handlers.onNotification(m), end: (how, error) => settle(how, error) });
    const message = { jsonrpc: '2.0' as const, id, method, params: { ...params, _meta: this.envelope(startClientRequestSpan(method, params, this.url, undefined).meta) } };
    if (this.channel) return this.openChannelStream(id, message, ended, settle);
    // A server that never answers the stream's headers is a failure, not a wait: the caller reconnects or polls.
    let timedOut = false;
    const timer = this.timeoutMs > 0 ? setTimeout(() => ((timedOut = true), ctl.abort()), this.timeoutMs) : undefined;
    try {
      await this.transport!.send(message as never, { requestSignal: ctl.signal, onRequestStreamEnd: () => settle('cut') });
      if (!this.seen.get(id)?.sse) settle('cut'); // answered with plain JSON (an error was routed already)
    } catch (e) {
      settle('cut', timedOut ? new TransportError(`${method}: no response within ${this.timeoutMs} ms`) : ctl.signal.aborted ? undefined : this.classify(id, e, method));
    } finally {
      clearTimeout(timer);
    }
    return {
      id,
      ended,
      close: () => {
        ctl.abort();
        settle('closed');
      },
    };
  }

  /** A stream over the channel: its notifications and its result come as messages; closing it cancels the request. */
  private async openChannelStream(id: number, message: JsonRpcMessage, ended: Promise<'result' | 'cut' | 'closed'>, settle: (how: 'result' | 'cut' | 'closed', error?: unknown) => void): Promise<OpenStream> {
    try {
      await this.sendOnChannel(message);
    } catch (e) {
      settle('cut', this.classify(id, e, message.method ?? '?'));
    }
    return {
      id,
      ended,
      close: () => {
        if (this.streams.has(id)) void this.sendOnChannel({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id } }).catch(() => undefined);
        settle('closed');
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of [...this.streams.values()]) s.end('cut');
    for (const [id, p] of [...this.pending]) {
      this.pending.delete(id);
      p.reject(new TransportError('The client was closed before the answer came', { retryable: false }));
    }
    if (this.carrierStarted) {
      // A 2025-11-25 session over HTTP is ended for the server too (DELETE), so it stops sending requests to it.
      if (this.session && this.transport) await this.transport.terminateSession().catch(() => undefined);
      await (this.channel ?? this.transport!).close();
    }
  }
}
