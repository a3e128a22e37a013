/**
 * The task page's output: the newest items of the task's output log (read from the store, as every seam reads it),
 * text shown as text and anything else as its JSON, all escaped. It stays current the way the rest of the page does:
 * an output write signals the bus, the page's event stream says "changed", and live.js re-reads the page. Shown only
 * with `--dashboard-payloads` (output is the task's content, like its arguments and result); its count always.
 */
import { Html, html } from './html.js';
import { cell, dataTable } from './table.js';
import type { OutputItem } from '../../store/output.js';
import type { TaskStore } from '../../store/types.js';

/** Items the page shows (the newest). */
export const OUTPUT_SHOWN = 200;

export interface OutputTail {
  items: OutputItem[];
  /** The earliest retained seq (null: none) and the latest (0: no output). */
  first: number | null;
  last: number;
}

/** The newest `n` items of a task's output (the operator reads any task: the task's own principal is passed). */
export async function outputTail(store: TaskStore, taskId: string, principal: string, n: number): Promise<OutputTail | undefined> {
  const head = await store.output.read(taskId, principal, 0, 1);
  if (!head || head.last === 0) return undefined;
  const after = Math.max(0, (head.first ?? head.last) - 1, head.last - n);
  const page = await store.output.read(taskId, principal, after, n);
  return page ? { items: page.items, first: page.first, last: page.last } : undefined;
}

function shown(i: OutputItem): string {
  const d = i.data as { type?: unknown; text?: unknown } | null;
  if (i.type === 'text' && d && typeof d.text === 'string') return d.text;
  return JSON.stringify(i.data, null, 1);
}

export function outputSection(o: OutputTail, showPayloads: boolean): Html {
  const skipped = o.items.length ? o.items[0]!.seq - 1 : o.last;
  const summary = html`<p class="hint" data-testid="output-count">${o.last} item${o.last === 1 ? '' : 's'} (latest seq ${o.last})${skipped > 0 ? html`; the newest ${o.items.length} shown` : ''}</p>`;
  if (!showPayloads) return html`<section><h2>Output</h2>${summary}<p class="empty">Hidden: the server's operator has not turned payloads on (<code>--dashboard-payloads</code>).</p></section>`;
  return html`<section><h2>Output</h2>${summary}${dataTable('output', ['Seq', 'When', 'Type', 'Output'], o.items.map((i) => ({
    data: { seq: String(i.seq) },
    cells: [i.seq, new Date(i.at).toISOString(), i.type, cell(shown(i), { cls: 'msg' })],
  })))}</section>`;
}
