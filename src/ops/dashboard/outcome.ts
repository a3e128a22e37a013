/**
 * What a task came to, as the dashboard shows it. The store keeps the last status message a handler reported while it
 * ran ("waiting for approval to run 0007_drop_col") after the task completed, so a finished task is shown by its
 * outcome (completed, failed with its error, cancelled and why), and its last running status only labelled as such.
 */
import { isTerminal } from '../../protocol/index.js';
import type { OpsTaskDetail, OpsTaskRow } from '../../store/types.js';
import { html, type Html } from './html.js';

/** A list's line for a task: an unfinished task's status message, a finished one's outcome. */
export function taskLine(t: Pick<OpsTaskRow, 'status' | 'statusMessage' | 'errorMessage'>): string {
  if (t.status === 'completed') return 'completed';
  if (t.status === 'failed') return t.errorMessage ?? 'failed';
  // A cancel writes its own message (who or what cancelled it), never the running one.
  if (t.status === 'cancelled') return t.statusMessage ?? 'cancelled';
  return t.statusMessage ?? '';
}

function outcome(t: OpsTaskDetail): Html | string {
  if (t.status === 'completed') return (t.result as { isError?: unknown } | null)?.isError === true ? 'completed, with a tool error (isError)' : 'completed';
  // The page shows a failure's error first, above these facts.
  if (t.status === 'failed') return t.error ? 'failed, with the error above' : 'failed';
  const by = t.cancelledBy ? ` by operator ${t.cancelledBy}` : '';
  return html`cancelled${by}${t.cancelReason ? `: ${t.cancelReason}` : t.statusMessage ? ` (${t.statusMessage})` : ''}`;
}

/** The task page's facts about where it stands: its status message while unfinished; its outcome once finished,
 *  then (a completed task) the status it last reported while running, labelled so. */
export function standingFacts(t: OpsTaskDetail): Html {
  if (!isTerminal(t.status)) return html`<dt>Status message</dt><dd class="msg" data-testid="status-message">${t.statusMessage ?? ''}</dd>`;
  return html`<dt>Outcome</dt><dd class="msg" data-testid="outcome">${outcome(t)}</dd>
${t.status === 'completed' && t.statusMessage ? html`<dt>Last status while running</dt><dd class="msg hint" data-testid="last-status">${t.statusMessage}</dd>` : ''}`;
}
