/**
 * How the CLI prints a task's output (`outlast call`, `outlast resume`, `outlast logs`), like `docker logs`: a text
 * item as its text (its own lines), any other item (an image, a resource link, a vendor event) as one JSON line
 * `{"seq", "type", "data"}`.
 */
import type { OutputEvent, OutputGap } from '../client/output.js';

export function outputLine(e: OutputEvent): string {
  const d = e.data as { type?: unknown; text?: unknown } | undefined;
  if (e.type === 'text' && typeof d?.text === 'string') return d.text;
  return JSON.stringify({ seq: e.seq, type: e.type, data: e.data });
}

/** What a gap in the output means, in one line (for stderr). */
export function gapLine(g: OutputGap): string {
  const what = g.lostFrom === g.lostTo ? `item ${g.lostFrom}` : `items ${g.lostFrom}–${g.lostTo}`;
  return `output ${what} of task ${g.taskId} ${g.lostFrom === g.lostTo ? 'is' : 'are'} no longer kept by the server (its per-task bound dropped the oldest); continuing at ${g.continuesAt}`;
}
