/**
 * A POST to a caller-given URL under SSRF rules, checked at every connection: the name is resolved, every address
 * that is not publicly routable (loopback, private, link-local, CGNAT, multicast, unique-local, IPv4-mapped forms of
 * those) is refused unless the operator allowed the host, the socket connects to the address that was checked, and
 * a redirect is never followed. Failures surface only as categories (never the receiver's body). A sender may keep
 * connections open between POSTs (callbackAgents): the check is made when a connection is opened, never skipped.
 */
import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { lookup } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

export type CallbackFailure = 'connection_refused' | 'timeout' | 'tls_error' | 'http_3xx' | 'http_4xx' | 'http_5xx' | 'challenge_failed' | 'blocked_address';

export class CallbackError extends Error {
  constructor(
    readonly reason: CallbackFailure,
    message: string,
    readonly status: number | null = null,
    /** For `blocked_address`: the kind of address refused (what a caller may be told). */
    readonly category?: AddressCategory,
  ) {
    super(message);
  }
}

/** What kind of address a refused one is: the only thing a caller is told about it (never the address a name
 *  resolved to; the operator's log says more). */
export type AddressCategory = 'loopback' | 'private' | 'link-local' | 'metadata' | 'shared (CGNAT)' | 'multicast' | 'unspecified' | 'reserved' | 'IPv4-mapped';

const CATEGORIES: Array<[AddressCategory, 'ipv4' | 'ipv6', Array<readonly [string, number]>]> = [
  ['metadata', 'ipv4', [['169.254.169.254', 32], ['100.100.100.200', 32]]],
  ['metadata', 'ipv6', [['fd00:ec2::254', 128]]],
  ['loopback', 'ipv4', [['127.0.0.0', 8]]],
  ['loopback', 'ipv6', [['::1', 128]]],
  ['unspecified', 'ipv4', [['0.0.0.0', 8]]],
  ['unspecified', 'ipv6', [['::', 128]]],
  ['private', 'ipv4', [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16]]],
  ['private', 'ipv6', [['fc00::', 7]]],
  ['link-local', 'ipv4', [['169.254.0.0', 16]]],
  ['link-local', 'ipv6', [['fe80::', 10]]],
  ['shared (CGNAT)', 'ipv4', [['100.64.0.0', 10]]],
  ['multicast', 'ipv4', [['224.0.0.0', 4]]],
  ['multicast', 'ipv6', [['ff00::', 8]]],
  ['reserved', 'ipv4', [['192.0.0.0', 24], ['192.0.2.0', 24], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], ['240.0.0.0', 4]]],
  ['reserved', 'ipv6', [['64:ff9b::', 96], ['2001:db8::', 32], ['2002::', 16], ['100::', 64]]],
];
const lists = CATEGORIES.map(([category, family, nets]) => {
  const list = new BlockList();
  for (const [net, bits] of nets) list.addSubnet(net, bits, family);
  return { category, family, list };
});

/** The IPv4 address inside an IPv4-mapped IPv6 one, dotted (`::ffff:127.0.0.1`) or hex (`::ffff:7f00:1`, as URL writes it). */
function mappedIPv4(ip: string): string | undefined {
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (dotted) return dotted[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(ip);
  if (!hex) return undefined;
  const [hi, lo] = [parseInt(hex[1]!, 16), parseInt(hex[2]!, 16)];
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** The category of an address that is not publicly routable (IPv4-mapped IPv6 judged as its IPv4), or null for a
 *  public one. Anything that is not an address is `reserved`. */
export function addressCategory(ip: string): AddressCategory | null {
  const address = mappedIPv4(ip) ?? ip;
  const family = isIP(address);
  if (family === 0) return 'reserved';
  const kind = family === 4 ? 'ipv4' : 'ipv6';
  for (const l of lists) if (l.family === kind && l.list.check(address, kind)) return l.category;
  // Any other IPv6 form of a mapped address (as written by URL) is refused whatever it maps to, as before.
  return /^::ffff:/i.test(ip) && !/^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(ip) ? 'IPv4-mapped' : null;
}

/** True when `ip` is not a publicly routable address (IPv4-mapped IPv6 is judged as its IPv4). */
export function isPrivateAddress(ip: string): boolean {
  return addressCategory(ip) !== null;
}

export interface CallbackPolicy {
  /** Hosts whose URLs pass the address check (and may use http://): operator-named, e.g. for tests on loopback. */
  allowHosts: ReadonlySet<string>;
}

function hostOf(u: URL): string {
  return u.hostname.replace(/^\[|\]$/g, '').toLowerCase();
}

/** How a refused address is named to a caller: its category, never the address. */
export function refusedAddress(category: AddressCategory): string {
  return `${/^[aeiouI]/.test(category) ? 'an' : 'a'} ${category} address, not a public one`;
}

/** Why a callback URL is refused at subscribe time (null: acceptable). Checks the form only; addresses are checked per connection. */
export function callbackUrlProblem(url: unknown, policy: CallbackPolicy): string | null {
  if (typeof url !== 'string' || url.length === 0) return 'delivery.url must be a string';
  if (url.length > 2048) return 'delivery.url is longer than 2048 characters';
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return `delivery.url is not a valid URL: ${JSON.stringify(url.slice(0, 100))}`;
  }
  if (u.username || u.password) return 'delivery.url must not carry credentials';
  if (u.hash) return 'delivery.url must not carry a fragment';
  const allowed = policy.allowHosts.has(hostOf(u));
  if (u.protocol === 'http:' && !allowed) return 'delivery.url must be https:// (http:// only for a host the operator allowed with --events-allow-host)';
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return 'delivery.url must be https://';
  const literal = isIP(hostOf(u)) ? addressCategory(hostOf(u)) : null;
  if (!allowed && literal) return `delivery.url points at ${refusedAddress(literal)}; the operator must allow that host with --events-allow-host`;
  return null;
}

export interface PostResult {
  status: number;
  retryAfterMs: number | undefined;
  /** At most `readLimit` bytes of the answer (read only when asked). */
  body: string;
}

/** Keep-alive connections to endpoints, one pool per sender: a burst of deliveries to one endpoint reuses a few
 *  connections instead of opening one per POST. Idle ones close after `idleMs` (sooner if the endpoint says so). */
export interface CallbackAgents {
  http: HttpAgent;
  https: HttpsAgent;
}

export function callbackAgents(idleMs = 4000): CallbackAgents {
  const o = { keepAlive: true, timeout: idleMs, maxFreeSockets: 64, scheduling: 'lifo' as const };
  return { http: new HttpAgent(o), https: new HttpsAgent(o) };
}

/** POSTs `body` under the SSRF rules; throws CallbackError with a category for every failure but an HTTP status.
 *  With `agents`, a kept-alive connection that the endpoint closed as it was reused is retried once on a new one. */
export async function checkedPost(url: string, headers: Record<string, string>, body: string, policy: CallbackPolicy, timeoutMs: number, readLimit = 0, agents?: CallbackAgents): Promise<PostResult> {
  try {
    return await postOnce(url, headers, body, policy, timeoutMs, readLimit, agents);
  } catch (e) {
    if (!(e instanceof StaleConnection)) throw e;
    return postOnce(url, headers, body, policy, timeoutMs, readLimit, agents);
  }
}

/** Bytes of an answer read (and dropped) so its connection stays reusable. */
const DRAIN_LIMIT = 16 * 1024;

/** A reused keep-alive connection failed before any answer (the endpoint closed it while idle). */
class StaleConnection extends Error {}

function postOnce(url: string, headers: Record<string, string>, body: string, policy: CallbackPolicy, timeoutMs: number, readLimit: number, agents: CallbackAgents | undefined): Promise<PostResult> {
  const u = new URL(url);
  const host = hostOf(u);
  const allowed = policy.allowHosts.has(host);
  const literal = isIP(host) ? addressCategory(host) : null;
  if (!allowed && literal) return Promise.reject(new CallbackError('blocked_address', `refused: ${host} is not a public address`, null, literal));
  // The socket connects to the address this lookup checked (no second resolution between check and connect).
  const checkedLookup: LookupFunction = (hostname, options, cb) => {
    lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return cb(err, '', 0);
      const list = addresses as Array<{ address: string; family: number }>;
      const bad = list.find((a) => isPrivateAddress(a.address));
      if (!allowed && bad) return cb(Object.assign(new Error(`refused: ${hostname} resolves to ${bad.address}, not a public address`), { code: 'EBLOCKED', category: addressCategory(bad.address) }), '', 0);
      if ((options as { all?: boolean }).all) return (cb as unknown as (e: null, a: typeof list) => void)(null, list);
      cb(null, list[0]!.address, list[0]!.family);
    });
  };
  return new Promise((resolve, reject) => {
    const https = u.protocol === 'https:';
    const agent = agents ? (https ? agents.https : agents.http) : false;
    let answered = false;
    const req = (https ? httpsRequest : httpRequest)(
      u,
      { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) }, lookup: checkedLookup, timeout: timeoutMs, agent },
      (res) => {
        answered = true;
        const status = res.statusCode ?? 0;
        const ra = Number(res.headers['retry-after']);
        const retryAfterMs = Number.isFinite(ra) && ra > 0 ? ra * 1000 : undefined;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size <= readLimit) chunks.push(c);
          // A short answer is read to its end (unkept) so the connection can serve the next POST; a long one is cut.
          else if (size > Math.max(readLimit, DRAIN_LIMIT)) res.destroy();
        });
        const done = () => {
          clearTimeout(timer);
          resolve({ status, retryAfterMs, body: Buffer.concat(chunks).toString('utf8') });
        };
        res.once('end', done);
        res.once('close', done);
        res.once('error', done);
      },
    );
    const timer = setTimeout(() => req.destroy(new CallbackError('timeout', `no answer within ${timeoutMs} ms`)), timeoutMs);
    req.once('close', () => clearTimeout(timer));
    req.once('timeout', () => req.destroy(new CallbackError('timeout', `no answer within ${timeoutMs} ms`)));
    req.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (e instanceof CallbackError) return reject(e);
      if (req.reusedSocket && !answered && (e.code === 'ECONNRESET' || e.code === 'EPIPE')) return reject(new StaleConnection(e.message));
      if (e.code === 'EBLOCKED') return reject(new CallbackError('blocked_address', e.message, null, (e as { category?: AddressCategory }).category ?? 'reserved'));
      if (/CERT|SSL|TLS/i.test(e.code ?? '') || /certificate|TLS|SSL/i.test(e.message)) return reject(new CallbackError('tls_error', 'TLS failed'));
      if (e.code === 'ETIMEDOUT') return reject(new CallbackError('timeout', 'connection timed out'));
      reject(new CallbackError('connection_refused', `could not connect (${e.code ?? 'error'})`));
    });
    req.end(body);
  });
}

/** The category of an HTTP status that is not a success. */
export function statusFailure(status: number): CallbackFailure {
  return status >= 500 ? 'http_5xx' : status >= 400 ? 'http_4xx' : 'http_3xx';
}
