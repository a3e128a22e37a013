/**
 * Answer links: `/answer/<token>` names one task, one input key, its deadline and the task's principal, sealed so
 * that a link reveals none of them and no one without the key can make or change one. The key every replica shares
 * through the store (`outlast-answer-links`), so any replica serves the page. Single use: once answered, the key is
 * no longer outstanding and the link is refused.
 *
 * The token (format 2): `base64url(0x02 ‖ iv) "." base64url(ciphertext ‖ tag)`, AES-256-GCM (node:crypto) over the
 * claims' JSON `{"t","k","d","p"}`, with the additional data `outlast-answer-link/2`. Keys: HKDF-SHA256 of the shared
 * key, info `outlast-answer-link/enc` (encryption) and `outlast-answer-link/iv`. The 12-byte IV is the first bytes
 * of HMAC-SHA256(iv key, claims) (a synthetic IV, as in SIV): the same question gives the same link on every replica
 * and in every text that shows it, and two different questions never share an IV. Two base64url parts and one dot,
 * the shape links always had (copied out of a sentence, each part ends at the first character that is not base64url).
 * Links of format 1 (`base64url(claims) "." HMAC-SHA256`, claims in clear), made before the upgrade, are still opened
 * until their question's deadline; none is made any more.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';

export interface AnswerLinkClaims {
  taskId: string;
  key: string;
  /** The question's deadline, ms since the epoch. */
  deadline: number;
  principal: string;
}

export const ANSWER_PATH = '/answer/';

const FORMAT = 2;
const AAD = Buffer.from('outlast-answer-link/2');
const IV_BYTES = 12;
const TAG_BYTES = 16;
/** The first part of a format-2 token: 13 bytes in base64url. */
const HEAD_CHARS = 18;

interface LinkKeys {
  enc: Buffer;
  iv: Buffer;
}
let cached: { secret: string; keys: LinkKeys } | undefined;

/** The keys derived from the shared link key (kept for the last key seen: a process has one). */
function keysOf(secret: string): LinkKeys {
  if (cached?.secret !== secret) {
    const derive = (info: string) => Buffer.from(hkdfSync('sha256', secret, Buffer.alloc(0), info, 32));
    cached = { secret, keys: { enc: derive('outlast-answer-link/enc'), iv: derive('outlast-answer-link/iv') } };
  }
  return cached.keys;
}

export function signAnswerToken(secret: string, c: AnswerLinkClaims): string {
  const keys = keysOf(secret);
  const plain = Buffer.from(JSON.stringify({ t: c.taskId, k: c.key, d: c.deadline, p: c.principal }));
  const iv = createHmac('sha256', keys.iv).update(plain).digest().subarray(0, IV_BYTES);
  const cipher = createCipheriv('aes-256-gcm', keys.enc, iv).setAAD(AAD);
  const sealed = Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
  return `${Buffer.concat([Buffer.of(FORMAT), iv]).toString('base64url')}.${sealed.toString('base64url')}`;
}

/** A token: two base64url parts and a dot, then what a sentence may have put after it (see answerTokenIn). */
const TOKEN_SHAPE = /^([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)(.*)$/su;
/** What a sentence puts straight after a link, and a copy keeps (a person's double-click, a model quoting it, an
 *  auto-linker, a URL regular expression): closing punctuation, brackets and quotes, straight and curly. */
const SENTENCE_TAIL = /^[.,;:!?)\]}>'"`*\u2018\u2019\u201C\u201D\u00BB\u203A]*$/u;

/** The token a link's last path segment (percent-decoded) carries, without the punctuation a sentence added after
 *  it; undefined when the segment is not a token followed only by such punctuation. */
export function answerTokenIn(segment: string): string | undefined {
  const m = TOKEN_SHAPE.exec(segment);
  return m && SENTENCE_TAIL.test(m[2]!) ? m[1] : undefined;
}

function claimsOf(json: string): AnswerLinkClaims | undefined {
  try {
    const o = JSON.parse(json) as { t?: unknown; k?: unknown; d?: unknown; p?: unknown };
    if (typeof o.t !== 'string' || typeof o.k !== 'string' || typeof o.d !== 'number' || typeof o.p !== 'string') return undefined;
    return { taskId: o.t, key: o.k, deadline: o.d, principal: o.p };
  } catch {
    return undefined;
  }
}

/** The claims of a token this server sealed; undefined for anything else (tampered, truncated, foreign). */
export function openAnswerToken(secret: string, token: string): AnswerLinkClaims | undefined {
  if (token.length > 4000) return undefined;
  const [head, body, extra] = token.split('.');
  if (!head || !body || extra !== undefined) return undefined;
  if (head.length !== HEAD_CHARS) return openFormat1(secret, head, body);
  const prefix = Buffer.from(head, 'base64url');
  const sealed = Buffer.from(body, 'base64url');
  // Only the one encoding of the bytes: base64url's spare low bits, a stray character or a trailing one are refused.
  if (prefix.toString('base64url') !== head || sealed.toString('base64url') !== body) return undefined;
  if (prefix.length !== 1 + IV_BYTES || prefix[0] !== FORMAT || sealed.length <= TAG_BYTES) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', keysOf(secret).enc, prefix.subarray(1)).setAAD(AAD);
    decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
    const plain = Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - TAG_BYTES)), decipher.final()]);
    return claimsOf(plain.toString('utf8'));
  } catch {
    return undefined; // the tag does not verify: changed, or sealed under another key
  }
}

/** A format-1 link (claims in clear, HMAC-SHA256), made before format 2: opened until its question's deadline. */
function openFormat1(secret: string, body: string, sig: string): AnswerLinkClaims | undefined {
  const want = createHmac('sha256', secret).update(`outlast-answer-link\n${body}`).digest();
  const got = Buffer.from(sig, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  return claimsOf(Buffer.from(body, 'base64url').toString('utf8'));
}

/** The CSRF value a form carries: bound to the browser's cookie and to this link. */
export function csrfFor(secret: string, cookie: string, token: string): string {
  return createHmac('sha256', secret).update(`outlast-answer-csrf\n${cookie}\n${token}`).digest('base64url');
}

export function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** One cookie's value from a request's Cookie header (the answer pages' CSRF, sign-in and session cookies). */
export function cookieValue(request: Request, name: string): string | undefined {
  for (const part of (request.headers.get('cookie') ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}
