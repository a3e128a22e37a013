/**
 * The CLI's tables (`outlast tasks`, `outlast tools`): columns padded to their widest cell, the whole line fitted to a
 * width (100 columns, or the terminal's), the widest shrinkable columns cut first and each cut cell ending in "…".
 * Cells are shown as one line without control characters: a server's text cannot move the cursor or colour the screen.
 */

export interface TableColumn {
  header: string;
  /** The narrowest this column may be cut to (default: never cut). The last column takes what is left. */
  min?: number;
}

const GAP = 2;

/** One line of text, without control characters (ANSI escapes, carriage returns, tabs become spaces). */
export function oneLine(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '').replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').replace(/ {2,}/g, ' ').trim();
}

const length = (s: string) => [...s].length;

/** `text` cut to `width` characters, its end replaced by "…" when it was cut. */
export function cut(text: string, width: number): string {
  const chars = [...text];
  if (chars.length <= width) return text;
  return width <= 0 ? '' : chars.slice(0, width - 1).join('') + '…';
}

/** The table's lines (header first), none longer than `width`. */
export function tableLines(columns: TableColumn[], rows: string[][], width: number): string[] {
  const cells = rows.map((r) => r.map(oneLine));
  const widths = columns.map((c, i) => Math.max(length(c.header), ...cells.map((r) => length(r[i] ?? ''))));
  const last = columns.length - 1;
  const total = () => widths.reduce((a, b) => a + b, 0) + GAP * last;
  // The widest column that may give way gives a character, until the line fits (or nothing may give way).
  const minOf = (i: number) => (i === last ? Math.min(widths[i]!, Math.max(columns[i]!.min ?? 0, length(columns[i]!.header))) : columns[i]!.min);
  while (total() > width) {
    let widest = -1;
    for (let i = 0; i <= last; i++) {
      const min = minOf(i);
      if (min !== undefined && widths[i]! > min && (widest < 0 || widths[i]! > widths[widest]!)) widest = i;
    }
    if (widest < 0) break; // the columns that may not be cut are wider than `width` by themselves
    widths[widest] = widths[widest]! - 1;
  }
  const line = (r: string[]) =>
    r
      .map((c, i) => {
        const shown = cut(c, widths[i]!);
        return i === last ? shown : shown + ' '.repeat(widths[i]! - length(shown));
      })
      .join(' '.repeat(GAP))
      .trimEnd();
  return [line(columns.map((c) => c.header)), ...cells.map(line)];
}

/** The width a table printed on `stream` fits: the terminal's, else 100 columns. */
export function tableWidth(stream: NodeJS.WriteStream): number {
  return stream.isTTY && stream.columns ? stream.columns : 100;
}
