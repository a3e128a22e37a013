/**
 * The answer page, a web-standard handler (Request → Response, undefined for paths that are not its own): renders
 * an outstanding elicitation as a form and records the answer as the task's, with the checks tasks/update makes.
 * Strict CSP (no script at all), CSRF (a cookie bound to an HMAC field), escaping; readable on a phone.
 */
import { randomBytes } from 'node:crypto';
import { TaskProtocolError, answeredByOf, type JsonObject } from '../../../protocol/index.js';
import type { TaskRuntime } from '../../../runtime/runtime.js';
import { ANSWER_PATH, answerTokenIn, cookieValue, csrfFor, openAnswerToken, sameString, type AnswerLinkClaims } from './links.js';
import { escapeHtml, readForm, renderFields } from '../../../ops/answer-form.js';
import { notice, page } from './html.js';
import { SIGNED_IN_PATH, type AnswerSignIn } from './sign-in.js';
import { readReply, renderSampling, replyField } from './sampling.js';

const COOKIE = 'outlast_answer_csrf';

export interface AnswerPageOptions {
  runtime: TaskRuntime;
  /** The shared link key (see AnswerLinks). */
  secret: () => string | undefined;
  /** Who this request is signed in as by its own credentials (a bearer header): a signed-in person must be the
   *  task's principal. undefined: not signed in. */
  principalOf?: (request: Request) => Promise<string | undefined> | string | undefined;
  /** The page's own sign-in (a front with OAuth): every answer comes from a signed-in person, the task's principal.
   *  Without it the link alone answers a browser that carries no credentials. */
  signIn?: AnswerSignIn;
  /** Mark the CSRF cookie Secure (the public URL is https). */
  secureCookie?: boolean;
  /** Largest form body accepted, bytes. Default 64 KiB. */
  maxBodyBytes?: number;
  /** The server's name as its MCP clients see it (serverInfo.name): the page says who is asking. */
  serverName?: string;
}

/** An open question as the page shows it. */
interface Question {
  claims: AnswerLinkClaims;
  message: string;
  schema: JsonObject;
  tool: string;
  /** When the store recorded the question; undefined for a question recorded before that was kept. */
  askedAt: number | undefined;
  /** A sampling request's params: the page shows the request and takes a written reply instead of a form. */
  sampling?: JsonObject;
}

const RELATIVE = new Intl.RelativeTimeFormat('en', { numeric: 'auto' });

/** "in 9 minutes", "3 minutes ago": right in every time zone (the page has no script to learn the reader's). */
function relativeTime(ms: number): string {
  const s = ms / 1000;
  const a = Math.abs(s);
  if (a < 60) return RELATIVE.format(Math.round(s), 'second');
  if (a < 5400) return RELATIVE.format(Math.round(s / 60), 'minute');
  if (a < 172_800) return RELATIVE.format(Math.round(s / 3600), 'hour');
  return RELATIVE.format(Math.round(s / 86_400), 'day');
}

/** A moment for a reader anywhere: relative to now, then in UTC (machine-readable in `datetime`). */
function moment(at: number, now: number): string {
  const iso = new Date(at).toISOString();
  return `${escapeHtml(relativeTime(at - now))} <span class="utc">(<time datetime="${escapeHtml(iso)}">${escapeHtml(iso.replace('T', ' ').slice(0, 16))} UTC</time>)</span>`;
}

/** A path segment percent-decoded; as it came when it is not valid percent-encoding (it then opens no token). */
function decodedSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** The page's handler; `body`: the request body when the front already read it (its Node adapter does). */
export function createAnswerPage(o: AnswerPageOptions): (request: Request, body?: Uint8Array | string) => Promise<Response | undefined> {
  const maxBody = o.maxBodyBytes ?? 65_536;

  /** The question a link names, if it is still open to this request; otherwise the page to answer with. */
  async function question(request: Request, token: string): Promise<Question | { refusal: Response }> {
    const secret = o.secret();
    const claims = secret ? openAnswerToken(secret, token) : undefined;
    if (!claims) return { refusal: notice(404, 'Link not valid', 'This answer link is not valid. Ask for a new one.') };
    if (Date.now() > claims.deadline) return { refusal: notice(410, 'Too late', 'The deadline for this question has passed; the answer can no longer be recorded.') };
    const who = (await o.signIn?.principalOf(request)) ?? (await o.principalOf?.(request));
    const again = { href: `${ANSWER_PATH}${token}?sign-in=again`, text: 'Sign in as someone else' };
    if (who === undefined && o.signIn) {
      // A GET goes to sign in and comes back here; a POST without a session is refused (its form came from nowhere we know).
      if (request.method === 'GET') return { refusal: await o.signIn.start(token) };
      return { refusal: notice(401, 'Sign in first', 'Sign in as the person who started the task, then answer.', { link: { href: `${ANSWER_PATH}${token}`, text: 'Sign in' } }) };
    }
    if (who !== undefined && who !== claims.principal) {
      return { refusal: notice(403, 'Not yours to answer', 'This question was asked of someone else. Sign in as the person who started the task.', o.signIn ? { link: again } : {}) };
    }
    const l = await o.runtime.store.get(claims.taskId);
    const pending = l.state === 'found' && l.record.principal === claims.principal ? l.record.inputRequests[claims.key] : undefined;
    if (!pending) {
      const earlier = l.state === 'found' && l.record.principal === claims.principal ? l.record.inputResponses[claims.key] : undefined;
      if (earlier && !earlier.timedOut) return { refusal: notice(410, 'Already answered', `This question has already been answered (${relativeTime(earlier.answeredAt - o.runtime.store.now())}); there is nothing more to do here.`) };
      return { refusal: notice(410, 'Nothing to answer', 'This question has already been answered, or the task no longer waits for it.') };
    }
    const params = (pending.request.params ?? {}) as JsonObject;
    const sampling = pending.request.method === 'sampling/createMessage';
    if (!sampling && (pending.request.method !== 'elicitation/create' || params.mode === 'url')) {
      return { refusal: notice(409, 'Not answerable here', `This request (${pending.request.method}) cannot be answered on a page: only form questions and sampling requests can. The client that started the task has to answer it.`) };
    }
    if (answeredByOf(pending.request) === 'operator') return { refusal: notice(409, 'Answered by an operator', 'An operator answers this question on the server\'s dashboard.') };
    const tool = l.state === 'found' ? l.record.tool : '';
    if (sampling) return { claims, message: 'The tool asks for a model\'s reply to the request below. Write the reply yourself.', schema: {}, tool, askedAt: pending.askedAt, sampling: params };
    return { claims, message: String(params.message ?? ''), schema: (params.requestedSchema ?? { type: 'object', properties: {} }) as JsonObject, tool, askedAt: pending.askedAt };
  }

  /** Who is asking, and by when: the server, its tool, when it asked and the deadline. */
  function asker(q: Question): string {
    const now = o.runtime.store.now();
    const row = (label: string, value: string) => `<dt>${label}</dt><dd>${value}</dd>`;
    return (
      '<dl class="asker">' +
      (o.serverName ? row('Server', `<b>${escapeHtml(o.serverName)}</b>`) : '') +
      row('Tool', `<code>${escapeHtml(q.tool)}</code>`) +
      (q.askedAt !== undefined ? row('Asked', moment(q.askedAt, now)) : '') +
      row('Deadline', moment(q.claims.deadline, now)) +
      '</dl>'
    );
  }

  function form(token: string, q: Question, cookie: string, values?: Record<string, string>, errors?: Record<string, string>, status = 200): Response {
    const csrf = csrfFor(o.secret()!, cookie, token);
    const open = `<form method="post" action="${ANSWER_PATH}${escapeHtml(token)}"><input type="hidden" name="csrf" value="${escapeHtml(csrf)}">`;
    // A sampling request has no decline: only a written reply answers it (a handle caller's refusal is not recorded).
    const body =
      asker(q) +
      `<p class="question">${escapeHtml(q.message)}</p>` +
      (q.sampling
        ? `${renderSampling(q.sampling)}${open}${replyField(values?.reply, errors?.reply)}<button type="submit" name="action" value="accept">Send reply</button></form>`
        : `${open}${renderFields(q.schema, values, errors)}<button type="submit" name="action" value="accept">Submit</button><button type="submit" name="action" value="decline" formnovalidate>Decline</button></form>`);
    return page(status, q.sampling ? 'A reply for you to write' : 'A question for you', body, {
      'set-cookie': `${COOKIE}=${cookie}; Path=${ANSWER_PATH}; HttpOnly; SameSite=Strict${o.secureCookie ? '; Secure' : ''}`,
    });
  }

  return async (request, given) => {
    const url = new URL(request.url);
    if (!url.pathname.startsWith(ANSWER_PATH)) return undefined;
    if (o.signIn && url.pathname === SIGNED_IN_PATH) {
      if (request.method !== 'GET') return new Response('Method not allowed', { status: 405, headers: { allow: 'GET' } });
      return o.signIn.callback(request);
    }
    // The link as a person copied it out of a sentence: the token, then maybe the punctuation that followed it
    // (percent-encoded by the browser when it is a quote or `>`). Everything below uses the token alone.
    const segment = decodedSegment(url.pathname.slice(ANSWER_PATH.length));
    const token = answerTokenIn(segment) ?? segment;
    if (request.method !== 'GET' && request.method !== 'POST') return new Response('Method not allowed', { status: 405, headers: { allow: 'GET, POST' } });
    if (o.signIn && request.method === 'GET' && url.searchParams.get('sign-in') === 'again') {
      // Only for a link this server signed: an unknown token never starts a sign-in.
      const secret = o.secret();
      if (secret && openAnswerToken(secret, token)) return o.signIn.start(token, true);
    }
    const q = await question(request, token);
    if ('refusal' in q) return q.refusal;
    if (request.method === 'GET') return form(token, q, cookieValue(request, COOKIE) ?? randomBytes(18).toString('base64url'));

    const length = Number(request.headers.get('content-length') ?? '0');
    if (length > maxBody) return notice(413, 'Too long', 'The answer is too long.');
    if (!/^application\/x-www-form-urlencoded/i.test(request.headers.get('content-type') ?? '')) return notice(415, 'Not a form', 'Answers are posted from the form on this page.');
    const text = given === undefined ? await request.text() : typeof given === 'string' ? given : new TextDecoder().decode(given);
    if (text.length > maxBody) return notice(413, 'Too long', 'The answer is too long.');
    const posted = new URLSearchParams(text);
    const cookie = cookieValue(request, COOKIE);
    const csrf = posted.get('csrf');
    if (!cookie || !csrf || !sameString(csrf, csrfFor(o.secret()!, cookie, token))) {
      return notice(403, 'Form expired', 'This form could not be checked (it was not sent from this page, or cookies are off). Open the link again and resubmit.');
    }
    const action = posted.get('action');
    let answer: JsonObject;
    if (q.sampling) {
      if (action !== 'accept') return notice(400, 'Unknown action', 'Use Send reply.');
      const read = readReply(posted);
      if ('error' in read) return form(token, q, cookie, { reply: read.value }, { reply: read.error }, 400);
      answer = read.result;
    } else if (action === 'decline') answer = { action: 'decline' };
    else if (action === 'accept') {
      const read = readForm(q.schema, posted);
      if ('errors' in read) return form(token, q, cookie, read.values, read.errors, 400);
      answer = { action: 'accept', content: read.content };
    } else return notice(400, 'Unknown action', 'Use Submit or Decline.');
    try {
      const accepted = await o.runtime.answerFromClient(q.claims.taskId, q.claims.principal, q.claims.key, { result: answer });
      if (!accepted) return notice(410, 'Nothing to answer', 'This question has already been answered, or the task no longer waits for it.');
    } catch (e) {
      if (e instanceof TaskProtocolError) return notice(/timed out|deadline|already answered/i.test(e.message) ? 410 : 400, 'Not recorded', e.message);
      throw e;
    }
    o.runtime.log.info('answer recorded from the answer page', { taskId: q.claims.taskId, key: q.claims.key, action: q.sampling ? 'reply' : (answer.action as string) });
    if (q.sampling) return notice(200, 'Thank you', 'Your reply is sent. The task goes on; you can close this page.');
    return notice(200, 'Thank you', action === 'decline' ? 'You declined. The task has been told.' : 'Your answer is recorded. The task goes on; you can close this page.');
  };
}
