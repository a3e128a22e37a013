/**
 * Questions for callers without task support (handle callers): a task's input requests reach the person the way
 * their client can take them. 2025-11-25: as `elicitation/create` (or sampling) on the stream of the call that waits
 * (the original tools/call while inline, each status call), answered by a POST any replica takes. 2026-07-28: as an
 * MRTR `input_required` result of the status call, whose retry's `inputResponses` become the task's answers.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { McpServer, ServerContext } from '@modelcontextprotocol/server';
import { TaskProtocolError, isTerminal, type InputRequest, type JsonObject } from '../../protocol/index.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import type { TaskView } from '../../store/types.js';
import type { LegacyTasks } from '../tasks-2025/legacy.js';
import { declaresUrlMode, elicitationIdOf } from '../tasks-2025/url-elicitation.js';
import { questionText } from '../core/question-text.js';

/**
 * Puts each new question of `taskId` on this request's stream while it waits (2025-11-25), unless another stream of
 * the caller already put it (QuestionAsks: one question, asked once per person); returns the stop. With
 * `linkOf` (the client declared URL mode, answer pages on), a question with an answer link goes out as a URL
 * elicitation, and `notifications/elicitation/complete` follows on this stream once it is no longer open.
 */
export function relayQuestionsOnStream(
  runtime: TaskRuntime,
  legacy: LegacyTasks,
  mcp: McpServer,
  ctx: ServerContext,
  taskId: string,
  principal: string,
  linkOf?: (v: TaskView, key: string) => string | undefined,
): (ended?: boolean) => void {
  const asking = legacy.asks.open(mcp, ctx, taskId);
  const askedByUrl = new Set<string>();
  let stopped = false;
  let unwatch = () => {};
  const complete = (key: string) => {
    askedByUrl.delete(key);
    legacy.notifyOnStream(mcp, ctx, 'notifications/elicitation/complete', { elicitationId: elicitationIdOf(taskId, key) });
  };
  void runtime
    .watchViews(taskId, principal, (v) => {
      if (stopped) return;
      for (const key of askedByUrl) if (v.status !== 'input_required' || !v.inputRequests[key]) complete(key);
      if (v.status !== 'input_required') return;
      for (const [key, pending] of Object.entries(v.inputRequests)) {
        if (!askableOnStream(pending.request)) continue;
        asking.offer(key, () => {
          const url = linkOf?.(v, key);
          if (url) askedByUrl.add(key);
          legacy.ask(mcp, ctx, taskId, principal, key, pending.request, pending.deadline, url, () => asking.failed(key));
        });
      }
    })
    .then((u) => (stopped ? u() : (unwatch = u)), (e) => runtime.log.debug('could not watch a task for its questions', { taskId, error: String(e) }));
  // ended: the call answers with the task's outcome, so its URL questions are complete (said before the answer leaves).
  return (ended = false) => {
    if (ended && !stopped) for (const key of askedByUrl) complete(key);
    stopped = true;
    unwatch();
    asking.end();
  };
}

/** Only questions for a person go out to a handle caller (answeredBy 'operator' waits for the dashboard). */
function askableOnStream(request: InputRequest): boolean {
  return (request.params?._meta as JsonObject | undefined)?.['outlast/answeredBy'] !== 'operator';
}

/** The kinds of input a 2026-07-28 request declared it can answer (from its per-request capabilities). */
export function declaredInputKinds(caps: JsonObject | undefined): Set<string> {
  const out = new Set<string>();
  if (!caps) return out;
  if (caps.elicitation) out.add('elicitation/create');
  if (declaresUrlMode(caps)) out.add('elicitation/url');
  if (caps.sampling) out.add('sampling/createMessage');
  if (caps.roots) out.add('roots/list');
  return out;
}

/**
 * URL mode for a 2026-07-28 caller that declared `elicitation.url` (answer pages on): each question with an answer
 * link is offered as a URL elicitation of it (a sampling request too, when the caller did not declare sampling);
 * `accepted` holds the keys this request's retry accepted (the person is on the page), which it does not offer again
 * while it waits.
 */
export interface UrlOffer {
  linkOf(v: Pick<TaskView, 'taskId' | 'principal' | 'inputRequests'>, key: string): string | undefined;
  accepted: Set<string>;
}

/** The outstanding questions of a task this client can answer through MRTR, as `inputRequests`. */
export function offerableQuestions(v: Pick<TaskView, 'taskId' | 'principal' | 'status' | 'inputRequests'>, kinds: Set<string>, url?: UrlOffer): Record<string, InputRequest> | undefined {
  if (v.status !== 'input_required') return undefined;
  const out: Record<string, InputRequest> = {};
  for (const [key, pending] of Object.entries(v.inputRequests)) {
    const { method } = pending.request;
    // A sampling request the caller cannot answer itself goes out as its page's link, when it takes URL elicitations.
    const onPage = method === 'sampling/createMessage' && !kinds.has(method);
    if ((!kinds.has(method) && !onPage) || !askableOnStream(pending.request)) continue;
    if (method === 'elicitation/create' && (pending.request.params as { mode?: string } | undefined)?.mode === 'url' && !(kinds.has('elicitation/url'))) continue;
    if (url?.accepted.has(key)) continue;
    const link = method !== 'sampling/createMessage' || onPage ? url?.linkOf(v, key) : undefined;
    if (onPage && !link) continue;
    // 2026-07-28 URL elicitations have no elicitationId: the retry names the question by its key.
    out[key] = link ? { method: 'elicitation/create', params: { mode: 'url', message: questionText(pending.request) || 'Please answer on this page', url: link } } : pending.request;
  }
  return Object.keys(out).length ? out : undefined;
}

/**
 * Records the `inputResponses` of an MRTR retry as the task's answers (each checked as tasks/update checks it).
 * Returns the error text for the model when an answer is refused.
 */
export async function recordRetryAnswers(runtime: TaskRuntime, taskId: string, principal: string, responses: Record<string, unknown> | undefined, url?: UrlOffer): Promise<string | undefined> {
  if (!responses) return undefined;
  for (const [key, value] of Object.entries(responses)) {
    try {
      // An accept without content answers a URL elicitation (the page records the answer, maybe already has).
      const v = value as { action?: unknown; content?: unknown } | null;
      if (url && v && typeof v === 'object' && v.action === 'accept' && v.content === undefined) {
        url.accepted.add(key);
        continue;
      }
      // A sampling request offered as its page's link has no decline: the page takes the reply until the deadline.
      if (url && v && typeof v === 'object' && (v.action === 'decline' || v.action === 'cancel')) {
        const pending = (await runtime.lookup(taskId, principal)).inputRequests[key];
        if (pending?.request.method === 'sampling/createMessage') continue;
      }
      await runtime.answerFromClient(taskId, principal, key, { result: value });
    } catch (e) {
      if (e instanceof TaskProtocolError) return `The answer to "${key}" was refused: ${e.message}`;
      throw e;
    }
  }
  return undefined;
}

/** An inline MRTR call's watch for a question: `watch` is the run's onTask, `question` settles with the first question
 *  the caller can take, `stop` ends the watch when the call answers. */
export function askingOf(runtime: TaskRuntime, mrtr: { kinds: Set<string>; url?: UrlOffer | undefined }) {
  const stopped = new AbortController();
  let resolve!: (q: { taskId: string; questions: Record<string, InputRequest> }) => void;
  const question = new Promise<{ taskId: string; questions: Record<string, InputRequest> }>((r) => (resolve = r));
  return {
    question,
    watch: (record: { taskId: string; principal: string }) =>
      void untilEndOrQuestion(runtime, record.taskId, record.principal, 86_400_000, stopped.signal, (v) => offerableQuestions(v, mrtr.kinds, mrtr.url)).then((seen) =>
        seen && 'questions' in seen ? resolve({ taskId: record.taskId, questions: seen.questions }) : undefined),
    stop: () => stopped.abort(),
  };
}

/** Waits until the task ends, offers a question `offer` accepts, or `waitMs` passes; resolves with what it saw. */
export function untilEndOrQuestion(
  runtime: TaskRuntime,
  taskId: string,
  principal: string,
  waitMs: number,
  signal: AbortSignal,
  offer: (v: TaskView) => Record<string, InputRequest> | undefined,
): Promise<{ questions: Record<string, InputRequest> } | { ended: true } | undefined> {
  return new Promise((resolve) => {
    let done = false;
    let unwatch = () => {};
    const finish = (r: { questions: Record<string, InputRequest> } | { ended: true } | undefined) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      unwatch();
      resolve(r);
    };
    const timer = setTimeout(() => finish(undefined), waitMs);
    const onAbort = () => finish(undefined);
    signal.addEventListener('abort', onAbort, { once: true });
    void runtime
      .watchViews(taskId, principal, (v) => {
        if (isTerminal(v.status)) return finish({ ended: true });
        const q = offer(v);
        if (q) finish({ questions: q });
      })
      .then((u) => (done ? u() : (unwatch = u)), () => finish(undefined));
  });
}

const STATE_PREFIX = 'outlast-handle.';

/** The MRTR requestState of an inline call that became a task: names the task, sealed for its principal. */
export function sealTaskState(secret: string, taskId: string, principal: string): string {
  const body = Buffer.from(JSON.stringify({ t: taskId })).toString('base64url');
  return `${STATE_PREFIX}${body}.${createHmac('sha256', secret).update(`${body}\n${principal}`).digest('base64url')}`;
}

/** The task a requestState of ours names, if it is ours and sealed for this principal; undefined otherwise. */
export function openTaskState(secret: string, state: unknown, principal: string): string | undefined {
  if (typeof state !== 'string' || !state.startsWith(STATE_PREFIX) || state.length > 2000) return undefined;
  const [body, mac] = state.slice(STATE_PREFIX.length).split('.');
  if (!body || !mac) return undefined;
  const want = createHmac('sha256', secret).update(`${body}\n${principal}`).digest();
  const got = Buffer.from(mac, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) return undefined;
  try {
    const t = (JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as { t?: unknown }).t;
    return typeof t === 'string' ? t : undefined;
  } catch {
    return undefined;
  }
}
