/**
 * Handles: durable work for clients with no task support at all (most deployed hosts). A call that outruns the
 * handle budget is answered with a plain tool result naming a task; two plain tools follow it: a status tool (a
 * bounded long-poll that reports progress, then the tool's own result) and a cancel tool. Same tasks, same store,
 * same principal binding as every other wire.
 */
import type { CallToolResult, McpServer, ServerContext } from '@modelcontextprotocol/server';
import { CLIENT_CAPABILITIES_META, answeredByOf, declaresTasks } from '../../protocol/index.js';
import { checkContent } from '../../ops/answer-form.js';
import type { LegacyTasks } from '../tasks-2025/legacy.js';
import { type UrlOffer, declaredInputKinds, offerableQuestions, recordRetryAnswers, relayQuestionsOnStream, untilEndOrQuestion } from './questions.js';
import * as z from 'zod';
import { TaskProtocolError, isTerminal, type JsonObject } from '../../protocol/index.js';
import type { TaskRuntime } from '../../runtime/runtime.js';
import { isoOf } from '../../runtime/wire.js';
import type { TaskRecord } from '../../store/types.js';
import { handleOutput, withOutput } from './handle-output.js';
import { progressOnStream } from './stream-progress.js';
import { questionText } from '../core/question-text.js';

export interface HandleOptions {
  /** Name of the status tool. Default `outlast_task_status` (letters, digits and `_`, so every host accepts it). */
  statusTool?: string;
  /** Name of the cancel tool. Default `outlast_task_cancel`. */
  cancelTool?: string;
  /** Name of the tool that passes on an answer the user gave in the chat (questions asked with answeredBy 'any').
   *  Default `outlast_task_answer`. */
  answerTool?: string;
  /** An `auto` call from a client without task support that runs longer than this is answered with a handle, ms.
   *  Default 20 000: well below the ~60 s after which many hosts give up on a tool call. */
  afterMs?: number;
  /** Longest a status call waits for the task to finish before it answers with progress, s. Default 25. */
  maxWaitSeconds?: number;
}

export type ResolvedHandleOptions = Required<HandleOptions>;

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

export function resolveHandleOptions(h: boolean | HandleOptions | undefined): ResolvedHandleOptions | undefined {
  if (!h) return undefined;
  const o = h === true ? {} : h;
  const r: ResolvedHandleOptions = {
    statusTool: o.statusTool ?? 'outlast_task_status',
    cancelTool: o.cancelTool ?? 'outlast_task_cancel',
    answerTool: o.answerTool ?? 'outlast_task_answer',
    afterMs: o.afterMs ?? 20_000,
    maxWaitSeconds: o.maxWaitSeconds ?? 25,
  };
  for (const name of [r.statusTool, r.cancelTool, r.answerTool]) {
    if (!TOOL_NAME.test(name)) throw new RangeError(`handles: tool name "${name}" must be 1-64 letters, digits, "_" or "-"`);
  }
  if (new Set([r.statusTool, r.cancelTool, r.answerTool]).size !== 3) throw new RangeError('handles: the status, cancel and answer tools need different names');
  if (!Number.isInteger(r.afterMs) || r.afterMs < 0) throw new RangeError(`handles.afterMs must be a non-negative integer, got ${r.afterMs}`);
  if (!(r.maxWaitSeconds > 0 && r.maxWaitSeconds <= 55)) throw new RangeError(`handles.maxWaitSeconds must be above 0 and at most 55, got ${r.maxWaitSeconds}`);
  return r;
}

/** What the handle tools need from the server glue. */
export interface HandleHost {
  readonly runtime: TaskRuntime;
  readonly legacy: LegacyTasks;
  principal(ctx: ServerContext): string;
  /** Answer-page links of the task's open form questions (none when answer pages are off). */
  answerLinks(record: TaskRecord): Array<{ key: string; message: string; url: string }>;
  /** For a 2025-11-25 caller that declared URL-mode elicitation: the link each question is sent as instead of the form. */
  /** For a 2026-07-28 caller that declared URL-mode elicitation: its MRTR URL offer. */
  mrtrUrlOffer(caps: unknown): UrlOffer | undefined;
  urlQuestionLinks(mcp: McpServer, ctx: ServerContext): ((v: Pick<TaskRecord, 'taskId' | 'principal' | 'inputRequests'>, key: string) => string | undefined) | undefined;
}

// Built once, as objects: schemas are compiled when first used, and a raw shape is wrapped in a fresh z.object by the
// SDK at every registration, i.e. on every request's McpServer (measured: ~60 µs a request for the three).
const statusSchema = z.object({
  taskId: z.string().min(1).max(200).describe('The taskId from the handle'),
  waitSeconds: z.number().min(0).max(55).optional().describe('Longest to wait for the task to finish before answering with progress'),
  outputAfter: z.number().int().min(0).optional().describe('The outputAfter of the previous answer: only output produced after it is returned'),
});
const cancelSchema = z.object({ taskId: z.string().min(1).max(200).describe('The taskId from the handle') });
const answerSchema = z.object({
  taskId: z.string().min(1).max(200).describe('The taskId from the handle'),
  key: z.string().min(1).max(255).describe('The key of the question, from the status result (questions[].key)'),
  content: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).describe('The answer, one value per field of the question'),
});

function text(t: string, isError = false): CallToolResult {
  return isError ? { content: [{ type: 'text', text: t }], isError: true } : { content: [{ type: 'text', text: t }] };
}

function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  const m = Math.round(s / 60);
  return m < 90 ? `${m} min` : `${(m / 60).toFixed(1)} h`;
}

/** A link inside prose: in <…> (RFC 3986, appendix C) and at the end of its line, so that whatever takes it out of
 *  the text (a person, a model, a linkifier, a URL pattern, also on the text JSON-encoded, where a line break reads
 *  `\n`) takes the link alone; Markdown shows it as a link. */
function inText(url: string): string {
  return `<${url}>`;
}

/** The words for the host that shows the model only structuredContent: one link a line. */
function showToUser(links: Array<{ url: string }>): string {
  if (links.length === 1) return `Show this link to the user so they can answer: ${inText(links[0]!.url)}`;
  return `Show these links to the user so they can answer (one per question):${links.map((l) => `\n${inText(l.url)}`).join('')}`;
}

export class HandleTools {
  constructor(private readonly host: HandleHost, readonly options: ResolvedHandleOptions) {}

  /** Whether `name` is one of the handle tools. */
  owns(name: string): boolean {
    return name === this.options.statusTool || name === this.options.cancelTool || name === this.options.answerTool;
  }

  /** Adds the status and cancel tools to one McpServer (after the application's own tools, so a clash is seen). */
  register(mcp: McpServer, era: 'modern' | 'legacy' = 'modern'): void {
    const { statusTool, cancelTool, answerTool, maxWaitSeconds } = this.options;
    const existing = (mcp as unknown as { _registeredTools: Record<string, unknown> })._registeredTools;
    for (const name of [statusTool, cancelTool, answerTool]) {
      if (existing[name]) throw new Error(`The handle tool name "${name}" is taken by a tool of this server; choose another with handles.statusTool / handles.cancelTool`);
    }
    mcp.registerTool(
      statusTool,
      {
        title: 'Follow a background task',
        description:
          `Reports on a task that a tool started in the background (its result said so and gave a taskId). Waits up to ${maxWaitSeconds} s ` +
          'for it to finish; while it is still working, call this again with the same taskId. Do not call the original tool again: ' +
          'that would start the work a second time. Once finished, returns the tool\'s own result. Output the task produced since the ' +
          'previous call is included; pass back the outputAfter of the previous answer to get only what is new.',
        inputSchema: statusSchema,
        annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
      },
      (async (args: { taskId: string; waitSeconds?: number | undefined; outputAfter?: number | undefined }, ctx: ServerContext) => {
        const r = await this.status(args.taskId, args.waitSeconds, ctx, mcp, era);
        if (r.resultType === 'input_required') return r;
        return withOutput(r as CallToolResult, await handleOutput(this.host.runtime.store, args.taskId, this.host.principal(ctx), args.outputAfter ?? 0).catch((e) => {
          if (e instanceof TaskProtocolError) return undefined; // unknown or gone: the status answer already says so
          throw e;
        }));
      }) as never,
    );
    mcp.registerTool(
      cancelTool,
      {
        title: 'Cancel a background task',
        description: 'Asks a task that a tool started in the background to stop. Work that already finished keeps its result.',
        inputSchema: cancelSchema,
        annotations: { destructiveHint: true, idempotentHint: true, openWorldHint: false },
      },
      (args, ctx) => this.cancel(args.taskId, ctx),
    );
    mcp.registerTool(
      answerTool,
      {
        title: 'Answer a background task\'s question',
        description:
          `Passes on the user's answer to a question a background task asked, when ${statusTool} says this question may be answered by you. ` +
          'Only with what the user actually said; never invent an answer.',
        inputSchema: answerSchema,
        annotations: { idempotentHint: false, openWorldHint: false },
      },
      (args, ctx) => this.answer(args.taskId, args.key, args.content, ctx),
    );
  }

  /** The model passes on an answer the user gave in the chat: only for questions asked with answeredBy 'any'. */
  private async answer(taskId: string, key: string, content: JsonObject, ctx: ServerContext): Promise<CallToolResult> {
    const principal = this.host.principal(ctx);
    const read = await this.read(taskId, principal);
    if ('answer' in read) return read.answer;
    const r = read.record;
    const pending = r.inputRequests[key];
    if (!pending) {
      const open = Object.keys(r.inputRequests);
      return text(`Task ${r.taskId} has no open question "${key}"${open.length ? `; its open questions: ${open.join(', ')}` : ' (nothing is waiting for an answer)'}.`, true);
    }
    const by = answeredByOf(pending.request);
    if (by === 'person') {
      const link = this.host.answerLinks(r).find((l) => l.key === key);
      return text(`This question must be answered by the user themself, not passed on by you${link ? `. Show this link to the user, who answers there: ${inText(link.url)}` : `; their client asks them while you follow the task with ${this.options.statusTool}.`}`, true);
    }
    if (by === 'operator') return text(`This question is answered by an operator on the server's dashboard; call ${this.options.statusTool} to wait for it.`, true);
    const schema = ((pending.request.params as JsonObject | undefined)?.requestedSchema ?? {}) as JsonObject;
    const checked = checkContent(schema, content);
    if ('errors' in checked) return text(`The answer does not fit the question: ${Object.entries(checked.errors).map(([f, e]) => `${f} ${e}`).join('; ')}. Nothing was recorded.`, true);
    try {
      await this.host.runtime.answerFromClient(r.taskId, principal, key, { result: { action: 'accept', content: checked.content } });
    } catch (e) {
      if (e instanceof TaskProtocolError) return text(`The answer was not recorded: ${e.message}`, true);
      throw e;
    }
    this.host.runtime.log.info('answer passed on by the model', { taskId: r.taskId, key });
    return text(`Answer recorded for "${key}". Call ${this.options.statusTool} with {"taskId": "${r.taskId}"} to follow the task.`);
  }

  /** The answer to a call that became a task for a caller who cannot receive one. */
  handleResult(record: TaskRecord): CallToolResult {
    if (isTerminal(record.status)) return this.outcome(record);
    const queued = record.queuedAt !== null && record.parkedAt === null;
    const state = queued ? 'is waiting for a free slot on the server' : 'is still running';
    const summary = this.summary(record);
    return {
      content: [{ type: 'text', text: `"${record.tool}" ${state}; it continues in the background as task ${record.taskId}. It has run for ${duration(summary.runningForSeconds * 1000)} since the call started. ${summary.instructions}${this.waitingText(record)}` }],
      structuredContent: summary,
    };
  }

  /** What the model must do next, in words it acts on (hosts that show the model only structuredContent get them too). */
  private instructions(r: TaskRecord): string {
    const { statusTool, maxWaitSeconds } = this.options;
    return (
      `Do not call ${r.tool} again for this request: the work is already under way, and calling it again would start it a second time. ` +
      `Call ${statusTool} with {"taskId": "${r.taskId}"} to follow it: each call waits up to ${maxWaitSeconds} s and returns the result once it is done.`
    );
  }

  /** What a waiting task asks, and how its person can answer (the link to show them, or why there is none): one line
   *  per question, after the rest of the text, each link in <…> ending its line (nothing a copy could take along). */
  private waitingText(r: TaskRecord): string {
    if (r.status !== 'input_required') return '';
    const links = this.host.answerLinks(r);
    const parts = Object.entries(r.inputRequests).map(([key, p]) => {
      const link = links.find((l) => l.key === key);
      const what = questionText(p.request) || p.request.method;
      const by = answeredByOf(p.request);
      if (by === 'operator') return `"${what}": an operator answers it on the server's dashboard; keep following the task.`;
      const passOn = by === 'any' ? `if the user already gave the answer in the chat, pass it on with ${this.options.answerTool} {"taskId": "${r.taskId}", "key": "${key}", "content": {…}}` : '';
      if (link) return `"${what}" (key "${key}"): ${passOn ? `${passOn}; otherwise ` : ''}show this link to the user, who answers there: ${inText(link.url)}`;
      if (passOn) return `"${what}" (key "${key}"): ask the user; ${passOn}`;
      if (p.request.method === 'roots/list') return `"${what}" (roots/list): this kind of request has no answer page; only a client that declared roots can answer it.`;
      // With answer pages on, a sampling request has its link (above): without them only the client can reply.
      if (p.request.method === 'sampling/createMessage') return `"${what}" (sampling/createMessage): this server has no answer pages (no public URL), so only a client that declared sampling can answer it.`;
      return `"${what}": the user's client asks them while you follow the task with ${this.options.statusTool}, if it can show questions (once: keep following, do not ask again).`;
    });
    return `\nIt is waiting for the user to answer:${parts.map((p) => `\n- ${p}`).join('')}`;
  }

  private summary(r: TaskRecord): JsonObject & { runningForSeconds: number; instructions: string } {
    const links = r.status === 'input_required' ? this.host.answerLinks(r) : [];
    return {
      ...(r.status === 'input_required'
        ? { questions: Object.entries(r.inputRequests).map(([key, p]) => ({ key, method: p.request.method, message: questionText(p.request), answeredBy: answeredByOf(p.request), deadline: isoOf(p.deadline) })) }
        : {}),
      ...(links.length ? { answerLinks: links, showToUser: showToUser(links) } : {}),
      taskId: r.taskId,
      tool: r.tool,
      status: r.status,
      ...(r.statusMessage !== null ? { statusMessage: r.statusMessage } : {}),
      createdAt: isoOf(r.createdAt),
      lastUpdatedAt: isoOf(r.updatedAt),
      ttlMs: r.ttlMs,
      statusTool: this.options.statusTool,
      cancelTool: this.options.cancelTool,
      // createdAt is when the call started (a call that ran inline first is created as of its start).
      runningForSeconds: Math.max(0, Math.round((this.host.runtime.store.now() - r.createdAt) / 1000)),
      instructions: this.instructions(r),
      nextCall: { name: this.options.statusTool, arguments: { taskId: r.taskId } },
    };
  }

  /** A finished task as the caller sees it: the tool's own result, or what stopped it. */
  private outcome(r: TaskRecord): CallToolResult {
    if (r.status === 'completed' && r.result) {
      const { resultType: _resultType, ...result } = r.result;
      return result as CallToolResult;
    }
    if (r.status === 'failed') return text(`Task ${r.taskId} (${r.tool}) failed: ${r.error?.message ?? r.statusMessage ?? 'unknown error'}`, true);
    return text(`Task ${r.taskId} (${r.tool}) was cancelled before it finished; it has no result.`, true);
  }

  /** Reads the caller's task, or answers as for an unknown id (another principal's task reads exactly the same). */
  private async read(taskId: string, principal: string): Promise<{ record: TaskRecord } | { answer: CallToolResult }> {
    try {
      return { record: await this.host.runtime.lookup(taskId, principal) };
    } catch (e) {
      if (!(e instanceof TaskProtocolError)) throw e;
      return {
        answer: /expired/.test(e.message)
          ? text(`Task ${taskId} has expired: its result was kept for its retention time and is gone. Start the work again if it is still needed.`, true)
          : text(`Unknown task: ${taskId}. It may have expired, or the id may be wrong.`, true),
      };
    }
  }

  /** The caller's task, or what to answer instead: unknown, or its outcome once finished (noted as read). */
  private async current(taskId: string, principal: string): Promise<{ record: TaskRecord } | { answer: CallToolResult }> {
    const read = await this.read(taskId, principal);
    if ('answer' in read || !isTerminal(read.record.status)) return read;
    this.host.runtime.noteRetrieved(read.record);
    return { answer: this.outcome(read.record) };
  }

  private async status(taskId: string, waitSeconds: number | undefined, ctx: ServerContext, mcp: McpServer, era: 'modern' | 'legacy'): Promise<CallToolResult | JsonObject> {
    const principal = this.host.principal(ctx);
    const caps = (ctx.mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META] as JsonObject | undefined;
    // 2026-07-28 without Tasks: questions go out as MRTR input_required, and a retry carries their answers.
    const kinds = era === 'modern' && !declaresTasks(caps ?? {}) ? declaredInputKinds(caps) : new Set<string>();
    const url = kinds.size > 0 ? this.host.mrtrUrlOffer(caps) : undefined;
    const lookedUp = await this.read(taskId, principal);
    if ('record' in lookedUp && kinds.size > 0) {
      const refused = await recordRetryAnswers(this.host.runtime, lookedUp.record.taskId, principal, ctx.mcpReq.inputResponses as Record<string, unknown> | undefined, url);
      if (refused) return text(`${refused}. Call ${this.options.statusTool} with {"taskId": "${lookedUp.record.taskId}"} to be asked again.`, true);
    }
    const first = await this.current(taskId, principal);
    if ('answer' in first) return first.answer;
    const waitMs = Math.min(waitSeconds ?? this.options.maxWaitSeconds, this.options.maxWaitSeconds) * 1000;
    const stopProgress = progressOnStream(this.host.runtime, ctx, taskId, principal, (ctx.mcpReq._meta as { progressToken?: string | number } | undefined)?.progressToken);
    const stopRelay = era === 'legacy' ? relayQuestionsOnStream(this.host.runtime, this.host.legacy, mcp, ctx, first.record.taskId, principal, this.host.urlQuestionLinks(mcp, ctx)) : () => {};
    let ended = false;
    try {
      if (kinds.size > 0) {
        const seen = await untilEndOrQuestion(this.host.runtime, first.record.taskId, principal, waitMs, ctx.mcpReq.signal, (v) => offerableQuestions(v, kinds, url));
        if (seen && 'questions' in seen) return { resultType: 'input_required', inputRequests: seen.questions } as JsonObject;
      } else ended = (await this.host.runtime.untilTerminal(first.record.taskId, principal, waitMs, ctx.mcpReq.signal)) !== undefined;
    } finally {
      stopRelay(ended);
      stopProgress();
    }
    const later = await this.current(taskId, principal);
    if ('answer' in later) return later.answer;
    const now = later.record;
    const waiting = this.waitingText(now);
    const summary = this.summary(now);
    return {
      content: [
        {
          type: 'text',
          text:
            `Task ${now.taskId} (${now.tool}) is still ${now.status === 'working' ? 'working' : 'waiting'}${now.statusMessage ? `: ${now.statusMessage}` : ''}. ` +
            `It has run for ${duration(summary.runningForSeconds * 1000)}. ${summary.instructions}${waiting}`,
        },
      ],
      structuredContent: summary,
    };
  }

  private async cancel(taskId: string, ctx: ServerContext): Promise<CallToolResult> {
    const principal = this.host.principal(ctx);
    const read = await this.read(taskId, principal);
    if ('answer' in read) return read.answer;
    const first = read.record;
    if (isTerminal(first.status)) return text(`Task ${first.taskId} (${first.tool}) had already ended ${first.status}; nothing to cancel.`);
    await this.host.runtime.cancelTask(first.taskId, principal);
    const ended = await this.host.runtime.untilTerminal(first.taskId, principal, 5000, ctx.mcpReq.signal);
    if (!ended) return text(`Cancel of task ${first.taskId} (${first.tool}) requested; it is stopping. ${this.options.statusTool} tells when it has.`);
    return ended.status === 'cancelled'
      ? text(`Task ${first.taskId} (${first.tool}) is cancelled.`)
      : text(`Task ${first.taskId} (${first.tool}) finished (${ended.status}) before the cancel took effect; ${this.options.statusTool} returns its result.`);
  }
}
