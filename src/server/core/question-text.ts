/**
 * What a question asks, in one line of text (a form's message, or what a sampling request wants a reply to): for the
 * texts that offer its answer link (handles, questions, URL-mode elicitation) and the answer page's sampling view.
 */
import type { InputRequest, JsonObject } from '../../protocol/index.js';

export interface Content {
  type?: unknown;
  text?: unknown;
  mimeType?: unknown;
  name?: unknown;
}

function contentsOf(c: unknown): Content[] {
  if (Array.isArray(c)) return c.filter((x): x is Content => !!x && typeof x === 'object');
  return c && typeof c === 'object' ? [c as Content] : [];
}

export function messagesOf(params: JsonObject): Array<{ role: string; content: Content[] }> {
  const list = Array.isArray(params.messages) ? params.messages : [];
  return list.filter((m): m is JsonObject => !!m && typeof m === 'object' && !Array.isArray(m)).map((m) => ({ role: String(m.role ?? 'unknown'), content: contentsOf(m.content) }));
}

/** A content that is not text, by name only: "[image (image/png), not shown]". */
export function named(c: Content): string {
  const what = [typeof c.name === 'string' ? c.name : '', typeof c.mimeType === 'string' ? c.mimeType : ''].filter(Boolean).join(', ');
  return `[${String(c.type ?? 'unknown')}${what ? ` (${what})` : ''}, not shown]`;
}

/** What a question asks, for the texts that offer its link: a form's message ('' without one), or what a sampling
 *  request wants a reply to (its last user text, on one line). */
export function questionText(request: InputRequest): string {
  const params = request.params ?? {};
  if (request.method !== 'sampling/createMessage') return String(params.message ?? '');
  const last = messagesOf(params).filter((m) => m.role === 'user').at(-1);
  const text = (last?.content ?? []).map((c) => (c.type === 'text' && typeof c.text === 'string' ? c.text : named(c))).join(' ').replace(/\s+/g, ' ').trim();
  if (!text) return 'Write the reply to a request for a model\'s answer';
  return `Write the reply to: ${text.length > 200 ? `${text.slice(0, 199)}…` : text}`;
}
