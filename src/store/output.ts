/**
 * Task output: what a handler emits while it runs (`ctx.output`), one durable log per task. Each item gets the next
 * sequence number of its task (1, 2, 3 … no gaps), assigned where the row is written: the task row's `output_seq`
 * counter is bumped in the same statement (PostgreSQL) or transaction (SQLite) that inserts the items, and only while
 * the writer holds the task (owner and epoch, unfinished), so replicas never race for a number and a run that lost the
 * task writes nothing. Items go with their task (foreign key, cascade), and are read only by the task's principal.
 *
 * Bounds: at most `maxItems` items and `maxBytes` bytes (of the items' JSON data) are retained per task. Past either,
 * the OLDEST items are dropped (like `docker logs` rotation): the append succeeds, the earliest retained sequence
 * number moves up, and a reader whose cursor is older than it gets `events_gone` (never a silent gap). The newest
 * item is always kept. One item may not exceed MAX_OUTPUT_ITEM_BYTES: that append is refused before anything is
 * written. Both backends implement OutputStore.
 */
import type { TaskStatus } from '../protocol/index.js';
import type { WriteFence } from './task-record.js';

/** The migration that adds the output log, one number on both backends. */
export const OUTPUT_MIGRATION = 12;

/** Defaults of the per-task bounds (`outlast serve --max-output-per-task`, `--max-output-bytes-per-task`). */
export const DEFAULT_MAX_OUTPUT_ITEMS = 10_000;
export const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;
/** The largest item, in UTF-8 bytes of its data's JSON. */
export const MAX_OUTPUT_ITEM_BYTES = 64 * 1024;
/** The longest item type (`text`, `image`, `resource_link`, or a vendor-prefixed `com.example/progress`). */
export const MAX_OUTPUT_TYPE_LENGTH = 200;
/** Most items one read returns. */
export const MAX_OUTPUT_PAGE = 1000;

export interface OutputBounds {
  /** Items retained per task; older ones are dropped past it. */
  maxItems: number;
  /** Bytes (items' data JSON) retained per task; older items are dropped past it. */
  maxBytes: number;
}

/** One item to append. */
export interface OutputWrite {
  type: string;
  /** The JSON text of the item's data (exactly what a reader gets back). */
  data: string;
  /** Identity within the task (e.g. a durable step's key and the index in it): an item whose key is already stored is
   *  skipped, so a replayed step does not emit its output twice. null: always appended. */
  key: string | null;
}

export interface OutputItem {
  seq: number;
  type: string;
  /** The item's data, parsed from the stored JSON text. */
  data: unknown;
  /** When it was written (epoch ms). */
  at: number;
}

export interface OutputAppended {
  /** Items appended (keyed items already stored are not counted). */
  added: number;
  /** The task's latest sequence number after this append (0: none yet). */
  last: number;
}

export interface OutputPage {
  /** Items with seq > after, in order (at most `limit`). */
  items: OutputItem[];
  /** The earliest retained sequence number (null: nothing retained). */
  first: number | null;
  /** The latest sequence number (0: no output yet). */
  last: number;
  /** The task's status when read: a reader that has reached `last` of a terminal task has everything. */
  status: TaskStatus;
}

export interface OutputStore {
  /** Appends `items` in order (the writer holds the task under `fence`); TaskWriteRefused when it does not, or the task
   *  is terminal or gone. Then drops the oldest items past `bounds`. */
  append(taskId: string, fence: WriteFence, items: OutputWrite[], bounds: OutputBounds, now: number): Promise<OutputAppended>;
  /** The items after `after` (undefined: the task is unknown or `principal`'s it is not). */
  read(taskId: string, principal: string, after: number, limit: number): Promise<OutputPage | undefined>;
}

/** Whether a cursor `after` is older than what is retained (items after it were dropped). */
export function cursorGone(after: number, page: Pick<OutputPage, 'first' | 'last'>): boolean {
  if (after >= page.last) return false;
  return page.first === null || after + 1 < page.first;
}

/**
 * The rotation rule, after an append: `firstSeq`/`firstBase` are the earliest retained item and the task's output bytes
 * before it; `last`/`lastCum` the latest item and the bytes up to it. undefined: within the bounds. Otherwise the
 * items before `keepFrom` go, and when the bytes are over, also every item before the earliest one whose bytes before
 * it are at least `minBase` (the backend finds it with an indexed read: see keptFrom).
 */
export function rotation(
  head: { firstSeq: number; firstBase: number; last: number; lastCum: number },
  bounds: OutputBounds,
): { keepFrom: number; minBase: number | undefined; last: number } | undefined {
  const count = head.last - head.firstSeq + 1;
  const bytes = head.lastCum - head.firstBase;
  if (count <= bounds.maxItems && bytes <= bounds.maxBytes) return undefined;
  return { keepFrom: Math.max(head.firstSeq, head.last - bounds.maxItems + 1), minBase: bytes > bounds.maxBytes ? head.lastCum - bounds.maxBytes : undefined, last: head.last };
}

/** The first sequence number kept, given the item the byte bound found (undefined: none qualifies); the newest stays. */
export function keptFrom(r: { keepFrom: number; minBase: number | undefined; last: number }, byBytes: number | undefined): number {
  const keep = r.minBase === undefined ? r.keepFrom : Math.max(r.keepFrom, byBytes ?? r.last);
  return Math.min(keep, r.last);
}
