/**
 * Answer pages (`/answer/…`) for the questions of handle callers. A request that carries credentials must be the
 * task's principal; behind OAuth the page signs the person in itself, otherwise a browser without credentials is
 * answered on the link.
 */
import type { Outlast } from '../../outlast.js';
import { ANSWER_PATH, createAnswerPage, createAnswerSignIn } from '../../no-tasks/answers/index.js';
import { challengeReason, type FrontAuth } from '../auth.js';
import { fromWeb, isAnswer } from '../exchange.js';
import type { Route } from '../route.js';
import type { OutlastHandlerOptions } from '../types.js';

export interface AnswerPagesRoute extends Route {
  /** Resolves once the sign-in client is set up (behind OAuth). */
  ready(): Promise<void>;
}

/** The answer-page route, when answer pages are on. */
export function answerPagesRoute(outlast: Outlast, options: OutlastHandlerOptions, auth: FrontAuth): AnswerPagesRoute | undefined {
  const answers = outlast.answers;
  if (!answers) return undefined;
  const oauth = auth.oauth;
  const signIn =
    oauth && options.oauth
      ? createAnswerSignIn({
          issuer: options.oauth.issuers[0]!,
          resource: options.oauth.resource,
          scopes: options.oauth.scopes ?? [],
          ...(options.oauth.signInClient ? { client: options.oauth.signInClient } : {}),
          base: answers.base,
          secret: () => answers.key(),
          secureCookie: answers.base.startsWith('https:'),
          log: outlast.runtime.log,
          verify: async (accessToken) => {
            await auth.ready;
            const verdict = await oauth.authenticateHeader(`Bearer ${accessToken}`);
            if ('response' in verdict) return { reason: challengeReason(verdict.response) ?? `HTTP ${verdict.response.status}` };
            return { principal: outlast.principalOfAuth(verdict.authInfo), ...(verdict.authInfo.expiresAt ? { expiresAt: verdict.authInfo.expiresAt } : {}) };
          },
        })
      : undefined;
  const signInReady = signIn?.ready();
  signInReady?.catch(() => undefined);
  const page = createAnswerPage({
    runtime: outlast.runtime,
    secret: () => answers.key(),
    secureCookie: answers.base.startsWith('https:'),
    ...(options.serverInfo ? { serverName: options.serverInfo.name } : {}),
    ...(signIn ? { signIn } : {}),
    principalOf: async (request) => {
      if (!request.headers.get('authorization')) return undefined;
      const who = await auth.authenticate(fromWeb(request), undefined);
      // No credentials are checked here (no bearer, no OAuth): the page is answered on the link.
      if (who === undefined) return undefined;
      return isAnswer(who) ? '(refused credentials)' : outlast.principalOfAuth(who);
    },
  });
  return {
    ready: async () => void (await signInReady),
    async serve(request, extra, pathname) {
      if (!pathname.startsWith(ANSWER_PATH)) return undefined;
      const refused = auth.refusedHost(request);
      if (refused) return refused;
      if (extra?.rawBody === 'too-large') return new Response('The answer is too long.\n', { status: 413, headers: { 'content-type': 'text/plain' } });
      return page(request.web(), extra?.rawBody ?? (typeof extra?.parsedBody === 'string' ? extra.parsedBody : undefined));
    },
  };
}
