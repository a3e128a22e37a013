/**
 * The dashboard's tables. Every cell carries its column's name (`data-label`), so on a narrow screen the stylesheet
 * turns each row into a labelled card (style.css, no inline style or script: the CSP forbids them) instead of letting
 * columns run off the edge or squeeze text into a sliver.
 */
import { Html, html, type Part } from './html.js';

/** A cell with attributes of its own (the plain form is just its content). */
export interface Cell {
  value: Part;
  cls?: string;
  testid?: string;
  title?: string;
}

export interface Row {
  cells: Array<Part | Cell>;
  cls?: string;
  /** `data-*` attributes of the row (name without the prefix → value), e.g. { task: id }. */
  data?: Record<string, string>;
}

export function cell(value: Part, o: Omit<Cell, 'value'> = {}): Cell {
  return { value, ...o };
}

function isCell(c: Part | Cell): c is Cell {
  return typeof c === 'object' && c !== null && !(c instanceof Html) && !Array.isArray(c);
}

function td(label: string, c: Part | Cell): Html {
  if (!isCell(c)) return html`<td data-label="${label}">${c}</td>`;
  return html`<td${c.testid ? html` data-testid="${c.testid}"` : ''}${c.cls ? html` class="${c.cls}"` : ''}${c.title ? html` title="${c.title}"` : ''} data-label="${label}">${c.value}</td>`;
}

function tr(head: string[], r: Row): Html {
  const data = Object.entries(r.data ?? {}).map(([k, v]) => html` data-${new Html(k.replace(/[^a-z-]/g, ''))}="${v}"`);
  return html`<tr${data}${r.cls ? html` class="${r.cls}"` : ''}>${r.cells.map((c, i) => td(head[i] ?? '', c))}</tr>`;
}

/** A table whose rows become labelled cards on a phone; `head` names the columns ('' for an unnamed one). */
export function dataTable(testid: string | undefined, head: string[], rows: Row[]): Html {
  return html`<table class="cards"${testid ? html` data-testid="${testid}"` : ''}><thead><tr>${head.map((h) => html`<th>${h}</th>`)}</tr></thead><tbody>
${rows.map((r) => tr(head, r))}
</tbody></table>`;
}
