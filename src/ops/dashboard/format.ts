/** What every dashboard page is rendered with: the page context, and the small pieces each page shows the same way
 *  (times, a state badge, a task's link, the CSRF field). */
import { html, type Html } from './html.js';
import type { Operator } from './auth.js';

/** Where this server sends alerts: the operator webhook's URL and the push destinations' names. */
export interface AlertTargets {
  webhook?: string;
  push?: string[];
}

export interface PageContext {
  base: string;
  operator: Operator;
  csrf: string;
  /** Shown in the header (environment badge). */
  title: string;
  now: number;
  /** Where this server sends alerts; undefined when the dashboard runs apart from the servers and cannot know. */
  alertTargets?: AlertTargets | undefined;
}

export function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.round(s / 60);
  if (m < 120) return `${m} min`;
  const h = Math.round(m / 60);
  return h < 48 ? `${h} h` : `${Math.round(h / 24)} d`;
}

export const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? '' : new Date(ms).toISOString());

export function statusBadge(s: string): Html {
  return html`<span class="status s-${s}">${s}</span>`;
}

export function taskLink(ctx: PageContext, id: string): Html {
  return html`<a class="task-id" href="${ctx.base}/tasks/${encodeURIComponent(id)}">${id}</a>`;
}

export function csrfField(ctx: PageContext): Html {
  return html`<input type="hidden" name="_csrf" value="${ctx.csrf}">`;
}
