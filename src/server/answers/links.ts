/** Signed answer links: `/answer/<token>` names one task, one input key and its deadline, sealed with a key every
 *  replica shares through the store (so any replica serves the page). Single use: once answered, the key is no
 *  longer outstanding and the link is refused. */
import { createHmac, timingSafeEqual } from 'node:crypto';

export interface AnswerLinkClaims {
  taskId: string;
  key: string;
  /** The question's deadline, ms since the epoch. */
  deadline: number;
  principal: string;
}

export const ANSWER_PATH = '/answer/';

function mac(secret: string, body: string): Buffer {
  return createHmac('sha256', secret).update(`outlast-answer-link\n${body}`).digest();
}

export function signAnswerToken(secret: string, c: AnswerLinkClaims): string {
  const body = Buffer.from(JSON.stringify({ t: c.taskId, k: c.key, d: c.deadline, p: c.principal })).toString('base64url');
  return `${body}.${mac(secret, body).toString('base64url')}`;
}

/** A token as signed: the base64url body, a dot, the 43-character base64url HMAC-SHA256. */
const TOKEN_SHAPE = /^([A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43})(.*)$/su;
/** What a sentence puts straight after a link, and a copy keeps (a person's double-click, a model quoting it, an
 *  auto-linker, a URL regular expression): closing punctuation, brackets and quotes, straight and curly. */
const SENTENCE_TAIL = /^[.,;:!?)\]}>'"`*\u2018\u2019\u201C\u201D\u00BB\u203A]*$/u;

/** The token a link's last path segment (percent-decoded) carries, without the punctuation a sentence added after
 *  it; undefined when the segment is not a token followed only by such punctuation. */
export function answerTokenIn(segment: string): string | undefined {
  const m = TOKEN_SHAPE.exec(segment);
  return m && SENTENCE_TAIL.test(m[2]!) ? m[1] : undefined;
}

/** The claims of a token this server signed; undefined for anything else (tampered, truncated, foreign). */
export function openAnswerToken(secret: string, token: string): AnswerLinkClaims | undefined {
  if (token.length > 4000) return undefined;
  const [body, sig, extra] = token.split('.');
  if (!body || !sig || extra !== undefined) return undefined;
  const want = mac(secret, body);
  const got = Buffer.from(sig, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  try {
    const o = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as { t?: unknown; k?: unknown; d?: unknown; p?: unknown };
    if (typeof o.t !== 'string' || typeof o.k !== 'string' || typeof o.d !== 'number' || typeof o.p !== 'string') return undefined;
    return { taskId: o.t, key: o.k, deadline: o.d, principal: o.p };
  } catch {
    return undefined;
  }
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
