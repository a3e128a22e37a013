/**
 * Task output for handle callers (hosts without task support): each `outlast_task_status` answer carries the output
 * produced after the cursor the caller passed back (`outputAfter`, from the previous answer's structuredContent), a
 * bounded tail of it in the text the model reads, and the next cursor; so a model in a task-less host reads a build
 * log as it grows, call after call, each item once. Output already dropped by the per-task bound is reported as
 * skipped, not silently missing.
 */
import type { CallToolResult } from '@modelcontextprotocol/server';
import { TaskProtocolError, type JsonObject } from '../../protocol/index.js';
import { readOutput } from '../../runtime/output-follow.js';
import type { TaskStore } from '../../store/types.js';
import type { OutputItem } from '../../store/output.js';

/** Most items one status answer carries (the newest; older ones are counted as skipped). */
export const HANDLE_OUTPUT_ITEMS = 100;
/** Most characters of output in the text of one status answer (the end of it). */
export const HANDLE_OUTPUT_CHARS = 4000;

export interface HandleOutput {
  /** For structuredContent: the items, the range they cover, and the cursor for the next call. */
  structured: JsonObject;
  /** For the text: the tail of the output, or undefined when there was none since the cursor. */
  text: string | undefined;
}

/** One item as a line of text: a text block's text, otherwise its type and its JSON. */
function lineOf(i: OutputItem): string {
  const d = i.data as { type?: unknown; text?: unknown; uri?: unknown } | null;
  if (i.type === 'text' && typeof d?.text === 'string') return d.text;
  if (i.type === 'resource_link' && typeof d?.uri === 'string') return `[link] ${d.uri}`;
  return `[${i.type}] ${JSON.stringify(i.data).slice(0, 500)}`;
}

/** The output after `after` (the newest HANDLE_OUTPUT_ITEMS of it), or undefined when the task has none at all. */
export async function handleOutput(store: TaskStore, taskId: string, principal: string, after: number): Promise<HandleOutput | undefined> {
  let head;
  let skippedGone = 0;
  try {
    head = await readOutput(store, taskId, principal, after, 1);
  } catch (e) {
    const data = (e as TaskProtocolError).data as { reason?: string; earliestSeq?: number } | undefined;
    if (!(e instanceof TaskProtocolError) || data?.reason !== 'events_gone') throw e;
    // Dropped by the per-task bound: say how many, and go on from the earliest kept.
    skippedGone = data.earliestSeq! - 1 - after;
    after = data.earliestSeq! - 1;
    head = await readOutput(store, taskId, principal, after, 1);
  }
  if (head.last === 0) return undefined;
  const from = Math.max(after, head.last - HANDLE_OUTPUT_ITEMS);
  const items = from >= head.last ? [] : (await readOutput(store, taskId, principal, from, HANDLE_OUTPUT_ITEMS)).items;
  const last = items.at(-1)?.seq ?? Math.max(after, head.last);
  const skipped = skippedGone + (from - after);
  const structured: JsonObject = {
    outputAfter: last,
    output: { items: items.map((i) => ({ seq: i.seq, type: i.type, data: i.data })), skipped, latestSeq: head.last },
  };
  if (items.length === 0) return { structured, text: undefined };
  let body = items.map(lineOf).join('\n');
  if (body.length > HANDLE_OUTPUT_CHARS) body = `…${body.slice(body.length - HANDLE_OUTPUT_CHARS)}`;
  const range = items.length === 1 ? `seq ${items[0]!.seq}` : `seq ${items[0]!.seq}-${last}`;
  const note = skipped > 0 ? ` (${skipped} earlier item${skipped === 1 ? '' : 's'} not shown)` : '';
  return { structured, text: `New output (${range})${note}:\n${body}` };
}

/** `result` with the output added: a text block after its content, and the cursor in its structuredContent. */
export function withOutput(result: CallToolResult, out: HandleOutput | undefined): CallToolResult {
  if (!out) return result;
  const content = out.text ? [...(result.content ?? []), { type: 'text' as const, text: out.text }] : result.content;
  const structured = result.structuredContent as JsonObject | undefined;
  // A finished task answers with the tool's own result: the output joins only its text (its structuredContent, if
  // any, is the tool's, with the tool's schema). A running task's answer is ours: the items and the cursor join it.
  if (!structured || !('taskId' in structured)) return { ...result, content };
  const next = structured?.nextCall as { name: string; arguments: JsonObject } | undefined;
  return {
    ...result,
    content,
    structuredContent: {
      ...(structured ?? {}),
      ...out.structured,
      ...(next ? { nextCall: { ...next, arguments: { ...next.arguments, outputAfter: out.structured.outputAfter } } } : {}),
    },
  };
}
