/**
 * Answer pages: the fallback that reaches a person in any host. Each outstanding form question and sampling request
 * of a handle caller's task gets a signed, single-use link on the server's public URL; the page (createAnswerPage)
 * records the answer.
 */
import { answeredByOf } from '../../../protocol/index.js';
import type { TaskRecord } from '../../../store/types.js';
import { ANSWER_PATH, signAnswerToken } from './links.js';
import { questionText } from '../../core/question-text.js';

export { createAnswerPage, type AnswerPageOptions } from './page.js';
export { createAnswerSignIn, SIGNED_IN_PATH, type AnswerSignIn, type AnswerSignInOptions, type SignInClient } from './sign-in.js';
export { ANSWER_PATH, openAnswerToken, signAnswerToken, type AnswerLinkClaims } from './links.js';
export { PERSON_MODEL } from './sampling.js';

export interface AnswerLink {
  key: string;
  message: string;
  url: string;
}

/** Builds the links of a task's open questions on `publicUrl`, with the key shared through the store. */
export class AnswerLinks {
  private secret: string | undefined;
  readonly base: string;
  constructor(publicUrl: string) {
    const u = new URL(publicUrl);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new RangeError(`--public-url must be an http(s) URL, got ${publicUrl}`);
    this.base = u.href.replace(/\/+$/, '');
  }
  /** Loads the shared key (call once the store is started). */
  async load(sharedSecret: (name: string) => Promise<string>): Promise<void> {
    this.secret ??= await sharedSecret('outlast-answer-links');
  }
  key(): string | undefined {
    return this.secret;
  }
  /** One link for each open form question and sampling request (roots and URL elicitations have no page). */
  linksOf(r: Pick<TaskRecord, 'taskId' | 'principal' | 'inputRequests'>): AnswerLink[] {
    if (!this.secret) return [];
    const out: AnswerLink[] = [];
    for (const [key, pending] of Object.entries(r.inputRequests)) {
      const { method } = pending.request;
      const form = method === 'elicitation/create' && (pending.request.params as { mode?: string } | undefined)?.mode !== 'url';
      if (!(form || method === 'sampling/createMessage') || answeredByOf(pending.request) === 'operator') continue;
      const token = signAnswerToken(this.secret, { taskId: r.taskId, key, deadline: pending.deadline, principal: r.principal });
      out.push({ key, message: questionText(pending.request), url: `${this.base}${ANSWER_PATH}${token}` });
    }
    return out;
  }
}
