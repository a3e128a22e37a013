/**
 * Sampling questions on the answer page: a `sampling/createMessage` request shown as it is (system prompt, messages
 * with their roles, text; other content named, never rendered; maxTokens, model preferences), everything escaped, and
 * the reply a person writes returned as a `CreateMessageResult` whose `model` says a person wrote it.
 */
import type { JsonObject } from '../../../protocol/index.js';
import { escapeHtml } from '../../../ops/answer-form.js';
import { messagesOf, named } from '../../core/question-text.js';

/** The `model` of a reply written on the page: a person, not a model. */
export const PERSON_MODEL = 'human';

/** The request as the page shows it (every value escaped). */
export function renderSampling(params: JsonObject): string {
  const block = (s: string) => `<p class="text">${escapeHtml(s)}</p>`;
  const messages = messagesOf(params)
    .map((m) => `<div class="msg"><p class="role">${escapeHtml(m.role)}</p>${m.content.map((c) => (c.type === 'text' && typeof c.text === 'string' ? block(c.text) : `<p class="named">${escapeHtml(named(c))}</p>`)).join('')}</div>`)
    .join('');
  const rows: string[] = [];
  const row = (label: string, value: string) => rows.push(`<dt>${label}</dt><dd>${escapeHtml(value)}</dd>`);
  if (params.maxTokens !== undefined) row('Max tokens', String(params.maxTokens));
  const prefs = params.modelPreferences as JsonObject | undefined;
  if (prefs && typeof prefs === 'object') {
    const hints = Array.isArray(prefs.hints) ? prefs.hints.map((h) => String((h as JsonObject | null)?.name ?? '')).filter(Boolean) : [];
    if (hints.length) row('Models hinted', hints.join(', '));
    for (const [k, label] of [['intelligencePriority', 'Intelligence priority'], ['speedPriority', 'Speed priority'], ['costPriority', 'Cost priority']] as const) {
      if (prefs[k] !== undefined) row(label, String(prefs[k]));
    }
  }
  if (params.temperature !== undefined) row('Temperature', String(params.temperature));
  if (Array.isArray(params.stopSequences) && params.stopSequences.length) row('Stop sequences', params.stopSequences.map((s) => JSON.stringify(s)).join(', '));
  return (
    (typeof params.systemPrompt === 'string' && params.systemPrompt ? `<h2>System prompt</h2>${block(params.systemPrompt)}` : '') +
    `<h2>Messages</h2>${messages || '<p class="named">[no messages]</p>'}` +
    (rows.length ? `<dl class="asker">${rows.join('')}</dl>` : '')
  );
}

/** The form's reply field, with what was posted and the reason it was refused. */
export function replyField(value = '', error?: string): string {
  return (
    '<div class="field"><label for="f-reply">Your reply <span aria-hidden="true">*</span></label>' +
    '<p class="help">Write it as the model would answer; it is sent back as the reply (marked as written by a person).</p>' +
    `<textarea name="reply" id="f-reply" rows="8" required>${escapeHtml(value)}</textarea>` +
    (error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : '') +
    '</div>'
  );
}

/** The posted reply as a CreateMessageResult, or why it cannot be sent (an empty reply). */
export function readReply(form: URLSearchParams): { result: JsonObject } | { error: string; value: string } {
  const value = form.get('reply') ?? '';
  const text = value.replace(/\r\n?/g, '\n').trim();
  if (!text) return { error: 'Write a reply before sending it: an empty reply is not sent, and the question stays open.', value };
  return { result: { role: 'assistant', content: { type: 'text', text }, model: PERSON_MODEL, stopReason: 'endTurn' } };
}
