/**
 * The client commands of the `outlast` CLI:
 *   outlast call URL TOOL [ARGS_JSON] [--bearer T] [--journal P] [--json] [--detach] [--cancel-on-interrupt] [--answers JSON] [--poll]
 *   outlast call --stdio "CMD ARGS" TOOL [ARGS_JSON] [--env K=V]… [--cwd DIR] [same options]
 *   outlast tasks [--journal P] [--json]
 *   outlast resume [TASK_ID] [--bearer T] [--journal P] [--json] [--answers JSON] [--cancel-on-interrupt] [--poll]
 *   outlast cancel TASK_ID [--bearer T] [--journal P] [--url URL]…
 *   outlast logs TASK_ID [--follow] [--after N] [--bearer T] [--journal P] [--url URL]…
 *   outlast answer TASK_ID ANSWERS_JSON [--bearer T] [--journal P] [--url URL]…
 *   (`outlast tools` is tools-command.ts)
 *
 * A task's output (ctx.output) is printed as it comes, on stdout (stderr with --json, so stdout stays one JSON
 * document): text items as their lines, other items as one JSON line each (output-lines.ts). `outlast call … > file`
 * so keeps what the tool produced, then its result, while the status stays on the terminal.
 *
 * A server is named by its URL or, for `--stdio`, by its command, arguments and working directory (stdio-options.ts):
 * that is what the journal keeps, so `resume`, `cancel` and `logs` reach a stdio server by starting it again.
 *
 * `--url` (resume, cancel, logs, answer) names the task's server, or replicas of it tried in turn (replicas.ts): the
 * journal keeps the URL a call was made with, and one that does not answer is named with the way to give another.
 *
 * Exit codes (call, resume, logs --follow): 0 completed; 1 the tool reported an error, or the task failed / was
 * cancelled / expired / is unknown, or the server could not be reached; 2 bad usage; 3 the task waits for input this
 * run cannot give (detached; answer with `outlast resume ID --answers …` or on a terminal); 130 interrupted (Ctrl-C).
 */
import { basename } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { HelpRequested, UsageError, parseCommand } from './usage.js';
import type { DetailedTask, JsonObject } from '../protocol/index.js';
import { Journal, UNFINISHED_STATES, defaultJournalPath, type JournalEntry } from '../client/journal.js';
import { TaskClient, type CallToolResult, type ElicitationHandler, type TaskCall, type TaskClientOptions } from '../client/task-client.js';
import { answersFromJson, resolveAnswer, type Answers, type FormSchema } from '../client/answers.js';
import { OAUTH_HELP, OAUTH_OPTIONS, OAUTH_STRING_OPTIONS, cliOAuthProvider, login, logout, type OAuthFlagValues } from './oauth-commands.js';
import { latestOutputSeq, type OutputEvent } from '../client/output.js';
import { gapLine, outputLine } from './output-lines.js';
import { DetachedError, RpcError, TaskCancelledError, TaskFailedError, TaskGoneError, TransportError } from '../client/errors.js';
import { firstAnswering, probeFor, replicaUrls, whyNoAnswer } from './replicas.js';
import { closestNames } from './closest-names.js';
import { tableLines, tableWidth } from './table.js';
import { commandLine } from '../client/stdio-process.js';
import { parseStdioTarget } from '../client/stdio-transport.js';
import { STDIO_HELP, STDIO_OPTIONS, STDIO_STRING_OPTIONS, envFlags, stdioServerKey, type StdioFlagValues } from './stdio-options.js';

export const CLIENT_HELP = `Client commands:
  outlast call URL TOOL [ARGS_JSON] [options]   call TOOL on the MCP server at URL; follow its task to the end
  outlast call --stdio "CMD ARGS" TOOL [ARGS_JSON] [options]
                                                 the same with a server started as CMD ARGS, over its stdin/stdout
  outlast tools URL [--json]                     list the server's tools: task support, upstream, description
  outlast tools --stdio "CMD ARGS" [--json]      the same for a server started as CMD ARGS
  outlast tasks [--journal PATH] [--json]        list the calls in the journal (unfinished ones read again)
  outlast resume [TASK_ID] [options]             follow unfinished tasks (all, or one) to the end
  outlast cancel TASK_ID [--url URL]             ask the server to cancel a task
  outlast logs TASK_ID [--follow] [--after N]    print a task's output (--follow: until the task ends)
  outlast answer TASK_ID ANSWERS_JSON [--url URL]   answer a task's questions by input key or field

Options for call / resume / cancel / logs / answer:
  --bearer TOKEN           send Authorization: Bearer TOKEN; prefer $OUTLAST_BEARER (a flag's value is
                           readable by every local user)
  --journal PATH           the journal (default $OUTLAST_JOURNAL, else ${defaultJournalPath()})
  --json                   final result(s) as JSON on stdout; progress stays on stderr
  --detach                 (call) print the task id and exit; the task keeps running
  --notify URL             (call) a webhook (MCP Events, outlast.task.finished) for this call's task, even when detached
  --notify-secret whsec_…  (call) the secret deliveries are signed with (or $OUTLAST_NOTIFY_SECRET; default: a
                           fresh one, printed)
  --cancel-on-interrupt    Ctrl-C cancels the task (default: Ctrl-C detaches; resume later)
  --answers JSON           answers to form questions by input key or field, e.g. '{"confirm": true}'
                           (without a terminal, a question with no answer detaches with exit code 3)
  --poll                   poll tasks/get instead of listening for notifications/tasks
  --url URL                (resume, cancel, logs, answer) the server of TASK_ID, instead of the one the journal
                           has: a replica of it, tried in turn when repeated or comma-separated (A,B), e.g. when
                           the replica the call was made on is gone; needed for a task not in the journal
  --follow                 (logs) keep printing new output until the task ends, then its final state
  --after N                (logs) only the output after sequence number N (default 0: all that is kept)
${STDIO_HELP}
The task's output (ctx.output) is printed as it comes: on stdout, text as lines and other items as one JSON line
each, so \`outlast call … > file\` keeps it with the result; on stderr with --json.
Exit codes (call, resume, logs --follow): 0 completed, 1 tool error / failed / cancelled / expired / unreachable,
2 usage, 3 needs input, 130 Ctrl-C. See docs/clients-and-cli.md#the-cli

${OAUTH_HELP}`;

/** The process exit code a command asks for. */
export class Exit extends Error {
  constructor(readonly code: number, message = '') {
    super(message);
  }
}

const EXIT_INPUT = 3;
const EXIT_INTERRUPT = 130;

function err(line: string): void {
  process.stderr.write(line.endsWith('\n') ? line : line + '\n');
}

export function parse(argv: string[], command: string, allowed: string[] = []) {
  const r = parseKeepingDashIds(argv, command);
  for (const only of ['detach', 'url', 'notify', 'notify-secret', 'follow', 'after', 'stdio', 'cwd', 'env'] as const) {
    if (r.values[only] !== undefined && !allowed.includes(only)) throw new UsageError(`--${only} is not an option of outlast ${command}`);
  }
  // A flag's value is in this process's command line, which every local user can read.
  for (const [flag, env] of [['bearer', 'OUTLAST_BEARER'], ['notify-secret', 'OUTLAST_NOTIFY_SECRET']] as const) {
    if (r.values[flag] !== undefined) err(`outlast: warning: --${flag} puts a secret in this process's command line, which other local users can read (ps, /proc/PID/cmdline): use $${env} instead`);
  }
  return r;
}

const STRING_OPTIONS = new Set(['--bearer', '--journal', '--answers', '--url', '--notify', '--notify-secret', '--after', ...OAUTH_STRING_OPTIONS, ...STDIO_STRING_OPTIONS]);

/**
 * Task ids are base64url and may start with "-": a lone-dash token that is no option's value is a positional, kept in
 * its place among the others (`outlast answer -Xy… '{…}'` has the id first). It is parsed as a stand-in that cannot be
 * an option, then put back.
 */
function parseKeepingDashIds(argv: string[], command: string) {
  const dashed = new Map<string, string>();
  const args = argv.slice();
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--') break;
    if (a.startsWith('-') && !a.startsWith('--') && a.length > 2 && !STRING_OPTIONS.has(args[i - 1] ?? '')) {
      const standIn = `\u0000${dashed.size}`;
      dashed.set(standIn, a);
      args[i] = standIn;
    }
  }
  const parsed = parseCommand(command, args, CLIENT_OPTIONS);
  if (dashed.size) parsed.positionals = parsed.positionals.map((p) => dashed.get(p) ?? p);
  return parsed;
}

const CLIENT_OPTIONS = {
  bearer: { type: 'string' },
  journal: { type: 'string' },
  json: { type: 'boolean' },
  answers: { type: 'string' },
  'cancel-on-interrupt': { type: 'boolean' },
  poll: { type: 'boolean' },
  detach: { type: 'boolean' },
  url: { type: 'string', multiple: true },
  notify: { type: 'string' },
  'notify-secret': { type: 'string' },
  follow: { type: 'boolean' },
  after: { type: 'string' },
  ...OAUTH_OPTIONS,
  ...STDIO_OPTIONS,
} as const;

function openJournal(path: string | undefined): Journal {
  try {
    return new Journal(path ?? defaultJournalPath());
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

// ---- output ----------------------------------------------------------------------------------------------

/** The text a user reads from a CallToolResult (text blocks; other blocks as JSON). */
export function resultText(r: CallToolResult): string {
  const blocks = Array.isArray(r.content) ? r.content : [];
  const parts = blocks.map((b) => (b.type === 'text' && typeof b.text === 'string' ? b.text : JSON.stringify(b)));
  if (!parts.length && r.structuredContent) parts.push(JSON.stringify(r.structuredContent, null, 2));
  return parts.join('\n');
}

/** Live status on stderr: one rewritten line on a terminal, one line per change otherwise. */
class StatusLine {
  private readonly tty = !!process.stderr.isTTY;
  private text = '';
  private shown = false;
  private paused = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly started = Date.now();

  set(text: string): void {
    if (text === this.text) return;
    this.text = text;
    if (!this.tty) return err(text);
    this.render();
    if (!this.timer) this.timer = setInterval(() => this.render(), 250).unref();
  }
  private render(): void {
    if (!this.tty || this.paused || !this.text) return;
    const secs = ((Date.now() - this.started) / 1000).toFixed(1);
    const width = process.stderr.columns ?? 100;
    process.stderr.write(`\r\x1b[K${`${this.text} · ${secs} s`.slice(0, width - 1)}`);
    this.shown = true;
  }
  /** Writes output lines to `to` above the status line. */
  print(text: string, to: NodeJS.WriteStream): void {
    this.clear();
    to.write(text.endsWith('\n') ? text : text + '\n');
    this.render();
  }
  /** Prints a whole line above the status line. */
  say(line: string): void {
    this.clear();
    err(line);
    this.render();
  }
  clear(): void {
    if (this.tty && this.shown) process.stderr.write('\r\x1b[K');
    this.shown = false;
  }
  pause(): void {
    this.paused = true;
    this.clear();
  }
  resume(): void {
    this.paused = false;
    this.render();
  }
  stop(): void {
    clearInterval(this.timer);
    this.clear();
  }
}

// ---- input -----------------------------------------------------------------------------------------------

interface Ui {
  status: StatusLine;
  interactive: boolean;
  answers: Answers | undefined;
  /** Set when a question could not be answered in this run (non-interactive). */
  needsInput?: { taskId: string | undefined; key: string; message: string; fields: string[]; url?: string };
  /** Set when --answers is malformed for a question. */
  badAnswers?: string;
  onBlocked(): void;
}

let promptChain: Promise<unknown> = Promise.resolve();

/** Asks one form on the terminal, field by field. `!decline` / `!cancel` at any field answers so. */
async function promptForm(ui: Ui, key: string, params: JsonObject, signal: AbortSignal): Promise<JsonObject> {
  const schema = (params.requestedSchema ?? {}) as FormSchema & { properties?: Record<string, { type?: string; title?: string; description?: string; enum?: unknown[]; default?: unknown }> };
  const rl = createInterface({ input: process.stdin, output: process.stderr, terminal: true });
  ui.status.pause();
  try {
    err(`\n? ${String(params.message ?? key)}   [input "${key}"; type !decline or !cancel to refuse]`);
    const content: Record<string, unknown> = {};
    for (const [name, f] of Object.entries(schema.properties ?? {})) {
      const required = (schema.required ?? []).includes(name);
      const hint = f.type === 'boolean' ? ' (y/n)' : f.enum ? ` (${f.enum.join('/')})` : f.type === 'number' || f.type === 'integer' ? ` (${f.type})` : '';
      const label = `  ${f.title ?? name}${f.description ? ` — ${f.description}` : ''}${hint}${required ? '' : ' [optional]'}: `;
      for (;;) {
        const raw = (await rl.question(label, { signal })).trim();
        if (raw === '!decline' || raw === '!cancel') return { action: raw.slice(1) };
        if (raw === '') {
          if (!required) break;
          err('    an answer is required');
          continue;
        }
        let v: unknown = raw;
        if (f.type === 'boolean') {
          if (/^(y|yes|true)$/i.test(raw)) v = true;
          else if (/^(n|no|false)$/i.test(raw)) v = false;
          else {
            err('    answer y or n');
            continue;
          }
        } else if (f.type === 'number' || f.type === 'integer') {
          v = Number(raw);
          if (!Number.isFinite(v) || (f.type === 'integer' && !Number.isInteger(v))) {
            err(`    a${f.type === 'integer' ? 'n integer' : ' number'} please`);
            continue;
          }
        }
        if (f.enum && !f.enum.includes(v)) {
          err(`    one of ${f.enum.join(', ')}`);
          continue;
        }
        content[name] = v;
        break;
      }
    }
    return { action: 'accept', content };
  } finally {
    rl.close();
    ui.status.resume();
  }
}

function elicitationFor(ui: Ui): ElicitationHandler {
  return async (params, ctx) => {
    const fields = Object.keys(((params.requestedSchema ?? {}) as FormSchema).properties ?? {});
    if (ui.answers) {
      const r = resolveAnswer(ui.answers, ctx.key, params);
      if ('response' in r) {
        ui.status.say(`answered input "${ctx.key}" from --answers`);
        return r.response;
      }
      if ('error' in r) {
        ui.badAnswers = `--answers: ${r.error}`;
        ui.onBlocked();
        throw new Error(ui.badAnswers);
      }
    }
    if (ui.interactive && (params as { mode?: string }).mode !== 'url') {
      const p = promptChain.then(() => (ctx.signal.aborted ? Promise.reject(ctx.signal.reason) : promptForm(ui, ctx.key, params, ctx.signal)));
      promptChain = p.catch(() => undefined);
      return p;
    }
    const url = (params as { url?: string }).url;
    ui.needsInput = { taskId: ctx.taskId, key: ctx.key, message: String(params.message ?? ''), fields, ...(url ? { url } : {}) };
    ui.onBlocked();
    throw new Error('no answer available here');
  };
}

// ---- following calls ------------------------------------------------------------------------------------

interface Finished {
  call: TaskCall;
  result?: CallToolResult;
  error?: Error;
}

function describe(call: TaskCall): string {
  const t = call.task;
  if (!t) return `${call.tool}: calling…`;
  return `task ${t.taskId} ${t.status}${t.statusMessage ? `: ${t.statusMessage}` : ''}`;
}

/** Shows a call's progress and waits for its outcome (or a blocked question / interrupt). */
async function follow(call: TaskCall, ui: Ui, prefix = ''): Promise<Finished> {
  const show = () => ui.status.set(prefix + describe(call));
  call.on('task', show);
  call.on('input', (e) => {
    if (e.request.method !== 'elicitation/create') ui.status.say(`${prefix}the task asks for ${e.request.method} (input "${e.key}"), which this client does not support`);
  });
  call.on('answered', ({ key }) => ui.status.say(`${prefix}answer to "${key}" delivered`));
  call.on('note', (n) => {
    if (n.kind === 'fallback') ui.status.say(`${prefix}${n.reason}`);
    else if (n.kind === 'retry') ui.status.say(`${prefix}${n.error.message}; retrying in ${(n.delayMs / 1000).toFixed(1)} s`);
    else if (n.kind === 'output_failed') ui.status.say(`${prefix}the task's output could not be read to its end: ${n.error.message}`);
    else if (n.kind === 'rate_limited') ui.status.say(`${prefix}the server asked to poll slower; waiting ${(n.delayMs / 1000).toFixed(1)} s`);
  });
  if (call.task) show();
  try {
    return { call, result: await call.result() };
  } catch (e) {
    return { call, error: e as Error };
  }
}

/** Prints a call's output as it comes: stdout (stderr with --json); with several calls, each line names its task. */
function printOutput(ui: Ui, json: boolean, many: boolean) {
  const to = json ? process.stderr : process.stdout;
  const tag = (call: TaskCall) => (many ? `[${(call.taskId ?? call.callId).slice(0, 8)}] ` : '');
  return {
    onOutput: (e: OutputEvent, call: TaskCall) => {
      const line = outputLine(e);
      ui.status.print(many ? line.split('\n').map((l) => tag(call) + l).join('\n') : line, to);
    },
    onOutputGap: (g: Parameters<typeof gapLine>[0], call: TaskCall) => ui.status.say(tag(call) + gapLine(g)),
  };
}

function errorJson(e: Error): JsonObject {
  if (e instanceof TaskFailedError) return { status: 'failed', error: e.toJSON() as unknown as JsonObject };
  if (e instanceof TaskCancelledError) return { status: 'cancelled' };
  if (e instanceof TaskGoneError) return { status: e.reason, error: { message: e.message } };
  if (e instanceof RpcError) return { status: 'failed', error: e.toJSON() as unknown as JsonObject };
  return { status: 'error', error: { message: e.message } };
}

/** Prints one outcome; returns its exit code. */
function report(f: Finished, json: boolean, heading: string | undefined): number {
  if (f.result) {
    if (json) return f.result.isError ? 1 : 0;
    if (heading) process.stdout.write(`${heading}\n`);
    process.stdout.write(resultText(f.result) + '\n');
    return f.result.isError ? 1 : 0;
  }
  const e = f.error!;
  if (!json) err(`${heading ? `${heading}: ` : ''}${e.message}`);
  return 1;
}

function outcomeJson(f: Finished): JsonObject {
  const ids = { ...(f.call.taskId ? { taskId: f.call.taskId } : {}), callId: f.call.callId, tool: f.call.tool };
  if (f.result) return { ...ids, status: 'completed', result: f.result };
  return { ...ids, ...errorJson(f.error!) };
}

/** Ctrl-C: detach (default) or cancel (--cancel-on-interrupt; a second Ctrl-C detaches). */
function onInterrupt(calls: () => TaskCall[], client: () => TaskClient[], cancel: boolean, status: StatusLine): () => void {
  let count = 0;
  const handler = () => {
    count++;
    // A task still working on the server is detached even when its connection ended first (the group's Ctrl-C
    // reached a stdio server too): its user still needs the way back.
    const live = calls().filter((c) => !c.done || (c.taskId !== undefined && (c.status === 'working' || c.status === 'input_required')));
    if (cancel && count === 1 && live.some((c) => c.taskId)) {
      status.say('Ctrl-C: cancelling (Ctrl-C again to detach instead)');
      for (const c of live) void c.cancel().catch((e) => status.say(`cancel failed: ${(e as Error).message}`));
      return;
    }
    status.stop();
    for (const c of live) {
      err(
        c.taskId
          ? `Detached from task ${c.taskId}; it keeps running on the server. Continue with: outlast resume ${c.taskId}`
          : `Stopped before the server answered; the call is journaled as ${c.callId}. Continue with: outlast resume ${c.callId}`,
      );
      c.detach();
    }
    void Promise.all(client().map((x) => x.close())).finally(() => process.exit(EXIT_INTERRUPT));
  };
  process.on('SIGINT', handler);
  return () => process.off('SIGINT', handler);
}

type ServerFlagValues = { bearer?: string | undefined } & OAuthFlagValues & StdioFlagValues;

/**
 * How a TaskClient reaches the server a journal key names: a URL with the bearer token or OAuth, or a stdio server's
 * command started again in its directory with this run's --env (its stderr to `stderr`, else this process's).
 */
export function reach(server: string, values: ServerFlagValues, stderr?: (line: string) => void): Pick<TaskClientOptions, 'url' | 'stdio' | 'bearer' | 'auth'> {
  const stdio = parseStdioTarget(server);
  if (stdio) {
    const env = envFlags(values.env);
    return { stdio: { ...stdio, ...(env ? { env } : {}), ...(stderr ? { stderr } : {}) } };
  }
  const bearer = bearerOf(values);
  // A static token wins; otherwise OAuth, which does nothing until the server asks for it.
  return { url: server, ...(bearer ? { bearer } : { auth: cliOAuthProvider(server, values) }) };
}

/** The CLI's TaskClient for one server: form prompts (or --answers) for elicitation, push unless --poll (stdio polls).
 *  `replicaOf`: `server` is a replica of the journaled server it names. */
function cliClient(server: string, journal: Journal, ui: Ui, values: ServerFlagValues & { poll?: boolean | undefined }, replicaOf?: string): TaskClient {
  return new TaskClient({
    ...reach(server, values, (line) => ui.status.say(line)),
    ...(replicaOf !== undefined && replicaOf !== server ? { replicaOf } : {}),
    journal,
    ...(values.poll ? { status: 'poll' } : {}),
    elicitation: elicitationFor(ui),
    clientInfo: { name: 'outlast-cli', version: '0.1.0' },
  });
}

export async function loginCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'login');
  if (positionals.length !== 1) throw new UsageError('usage: outlast login URL [--client-id ID] [--client-credentials] [--open-browser]');
  try {
    return await login(positionals[0]!, values);
  } catch (e) {
    throw new Exit(1, `login: ${(e as Error).message}`);
  }
}

export async function logoutCommand(argv: string[]): Promise<number> {
  const { positionals } = parse(argv, 'logout');
  if (positionals.length !== 1) throw new UsageError('usage: outlast logout URL');
  return logout(positionals[0]!);
}

function bearerOf(values: { bearer?: string | undefined }): string | undefined {
  return values.bearer ?? process.env.OUTLAST_BEARER ?? undefined;
}

function makeUi(values: { answers?: string | undefined }, onBlocked: () => void): Ui {
  let answers: Answers | undefined;
  if (values.answers !== undefined) {
    try {
      answers = answersFromJson(values.answers);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
  }
  return { status: new StatusLine(), interactive: !!process.stdin.isTTY && !!process.stderr.isTTY, answers, onBlocked };
}

/** When a question cannot be answered in this run: detach everything and say how to answer (`stdio`: the server
 *  was this run's child and stops with it). */
function blockedExit(ui: Ui, stdio: boolean): Exit {
  if (ui.badAnswers) return new Exit(2, ui.badAnswers);
  const n = ui.needsInput!;
  const example = n.fields.length ? `'{"${n.fields[0]}": …}'` : `'{"${n.key}": {"action": "accept"}}'`;
  return new Exit(
    EXIT_INPUT,
    `task ${n.taskId ?? '?'} needs input "${n.key}": ${n.message}${n.fields.length ? ` (fields: ${n.fields.join(', ')})` : ''}\n` +
      // The link ends its line: nothing a copy of it could take along.
      (n.url ? `Answer on this page: ${n.url}\n` : '') +
      (stdio
        ? "Its stdio server stops with this run: a durable tool's question waits in the server's store, another tool's ends with the process. "
        : 'It keeps waiting on the server. ') +
      `Answer with: outlast resume ${n.taskId ?? ''} --answers ${example}   (or run it on a terminal)`,
  );
}

// ---- commands --------------------------------------------------------------------------------------------

export async function call(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'call', ['detach', 'notify', 'notify-secret', 'stdio', 'cwd', 'env']);
  const stdioKey = stdioServerKey(values);
  if (stdioKey && /^https?:\/\//i.test(positionals[0] ?? '')) throw new UsageError(`give the server as a URL or as --stdio "CMD ARGS", not both (got ${positionals[0]})`);
  if (stdioKey && values.bearer !== undefined) throw new UsageError('--bearer is for a server reached by URL; a --stdio server takes its credentials from its environment (--env K=V)');
  const [url, tool, argsJson, ...more] = stdioKey ? [stdioKey, ...positionals] : positionals;
  if (!url || !tool) {
    throw new UsageError(
      stdioKey
        ? 'usage: outlast call --stdio "CMD ARGS" TOOL [ARGS_JSON] (e.g. outlast call --stdio "node server.js" reindex \'{"collection":"docs"}\')'
        : 'usage: outlast call URL TOOL [ARGS_JSON] (e.g. outlast call http://127.0.0.1:3000/mcp reindex \'{"collection":"docs","documents":50000}\')',
    );
  }
  if (more.length) throw new UsageError(`unexpected argument "${more[0]}"; ARGS_JSON must be one quoted JSON object`);
  let args: JsonObject = {};
  if (argsJson !== undefined) {
    try {
      args = JSON.parse(argsJson) as JsonObject;
    } catch (e) {
      throw new UsageError(`ARGS_JSON is not valid JSON (${(e as Error).message}): ${argsJson}`);
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new UsageError(`ARGS_JSON must be a JSON object, such as '{"name": "x"}'; got ${argsJson}`);
  }
  let blocked!: () => void;
  const ui = makeUi(values, () => blocked());
  const journal = openJournal(values.journal);
  let client: TaskClient;
  try {
    client = cliClient(url, journal, ui, values);
  } catch (e) {
    journal.close();
    throw new UsageError((e as Error).message);
  }
  let handle: TaskCall | undefined;
  const blockedP = new Promise<'blocked'>((r) => (blocked = () => r('blocked')));
  const off = onInterrupt(() => (handle ? [handle] : []), () => [client], !!values['cancel-on-interrupt'], ui.status);
  try {
    ui.status.set(`${tool}: calling ${stdioKey ? `${values.stdio} (stdio)` : url}`);
    try {
      handle = await client.start(tool, args, { follow: !values.detach, ...(values.detach ? {} : printOutput(ui, !!values.json, false)) });
    } catch (e) {
      ui.status.stop();
      if (values.json) process.stdout.write(JSON.stringify(errorJson(e as Error)) + '\n');
      throw new Exit(1, `${tool}: ${(e as Error).message}${await unknownToolHint(client, tool, e, stdioKey ? `--stdio '${values.stdio}'` : url)}`);
    }
    if (values.notify && handle.taskId) {
      const secret = values['notify-secret'] ?? (process.env.OUTLAST_NOTIFY_SECRET || undefined);
      try {
        const s = await client.subscribeWebhook({ url: values.notify, arguments: { taskId: handle.taskId }, ...(secret ? { secret } : {}) });
        err(`notify: ${values.notify} subscribed (${s.id}) to task ${handle.taskId} finishing, until ${s.refreshBefore}${secret ? '' : `; deliveries are signed with ${s.secret}`}`);
      } catch (e) {
        err(`notify: could not subscribe ${values.notify}: ${(e as Error).message}`);
      }
    } else if (values.notify && handle.done) err('notify: the call finished at once (no task); nothing to subscribe');
    if (handle.taskId && !values.detach) {
      ui.status.say(`task ${handle.taskId} created (${handle.status}); Ctrl-C ${values['cancel-on-interrupt'] ? 'cancels it' : `detaches, \`outlast resume ${handle.taskId}\` continues`}`);
    } else if (handle.inline) ui.status.say(`${tool}: answered inline (it finished within the server's inline budget; no task)`);
    if (values.detach && !handle.done) {
      ui.status.stop();
      handle.detach();
      process.stdout.write(`${handle.taskId}\n`);
      err(`task ${handle.taskId} is running; follow it with: outlast resume ${handle.taskId}`);
      return 0;
    }
    const f = await Promise.race([follow(handle, ui), blockedP]);
    ui.status.stop();
    if (f === 'blocked') {
      handle.detach();
      throw blockedExit(ui, stdioKey !== undefined);
    }
    if (f.error instanceof DetachedError) return EXIT_INTERRUPT;
    if (values.json) process.stdout.write(JSON.stringify(f.result ?? errorJson(f.error!)) + '\n');
    return report(f, !!values.json, undefined);
  } finally {
    off();
    ui.status.stop();
    await client.close();
    journal.close();
  }
}

/** For a call of a tool the server does not have: the tools named most like it, and how to list them all. */
async function unknownToolHint(client: TaskClient, tool: string, e: unknown, server: string): Promise<string> {
  if (!(e instanceof RpcError) || !/not found|unknown tool/i.test(e.message) || !e.message.includes(tool)) return '';
  const list = `outlast tools ${server}`;
  try {
    const near = closestNames(tool, (await client.listTools()).tools.map((t) => t.name));
    return near.length ? `. The closest: ${near.join(', ')}; list them all with: ${list}` : `; list the tools with: ${list}`;
  } catch {
    return `; list the tools with: ${list}`;
  }
}

function age(ms: number): string {
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** A journaled server as a person reads it: the URL, or a stdio server's command line and directory. */
function serverLabel(server: string): string {
  const stdio = parseStdioTarget(server);
  return stdio ? `stdio: ${commandLine(stdio.command, stdio.args)} (in ${stdio.cwd})` : server;
}

/** The same, short, for a table: a stdio server's command and arguments with their paths as file names only. */
function shortServerLabel(server: string): string {
  const stdio = parseStdioTarget(server);
  const short = (word: string) => (/^\.{0,2}\//.test(word) ? basename(word) : word);
  return stdio ? `stdio: ${commandLine(short(stdio.command), stdio.args.map(short))}` : server;
}

/** What `outlast tasks` reads again before it shows the journal: the most recent unfinished entries of servers
 *  reached by URL (a stdio one would be started for it), so many at once, each with a short deadline. */
const REREAD = { entries: 20, parallel: 8, timeoutMs: 2000 };

/**
 * Reads the unfinished entries `outlast tasks` shows again from their servers (`tasks/get`, no retry) and records
 * what they say in the journal, so a task cancelled or finished since is not shown as running. Returns, per call,
 * why it could not be read (the journal's state is shown then).
 */
async function rereadUnfinished(journal: Journal, values: { bearer?: string | undefined }): Promise<Map<string, string>> {
  const notes = new Map<string, string>();
  const open = journal
    .list()
    .filter((e) => UNFINISHED_STATES.includes(e.state) && e.taskId !== undefined && !parseStdioTarget(e.serverUrl))
    .slice(-REREAD.entries);
  if (!open.length) return notes;
  const bearer = bearerOf(values);
  const clients = new Map<string, TaskClient>();
  // Only a static token: a listing must never start an OAuth sign-in.
  const clientOf = (url: string) => {
    let c = clients.get(url);
    if (!c) clients.set(url, (c = new TaskClient({ url, ...(bearer ? { bearer } : {}), journal, requestTimeoutMs: REREAD.timeoutMs, retry: { attempts: 1 }, clientInfo: { name: 'outlast-cli', version: '0.1.0' } })));
    return c;
  };
  const queue = [...open];
  const worker = async () => {
    for (let e = queue.shift(); e; e = queue.shift()) {
      try {
        journal.record(e.callId, await clientOf(e.serverUrl).getTask(e.taskId!));
      } catch (x) {
        notes.set(e.callId, x instanceof TaskGoneError ? `${x.reason === 'expired' ? 'expired' : 'not found'} on the server` : x instanceof TransportError ? `not read again: ${whyNoAnswer(x)}` : `not read again: ${(x as Error).message}`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(REREAD.parallel, open.length) }, worker));
  } finally {
    await Promise.all([...clients.values()].map((c) => c.close()));
  }
  return notes;
}

export async function tasks(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'tasks');
  if (positionals.length) throw new UsageError(`outlast tasks takes no arguments (got "${positionals[0]}")`);
  const journal = openJournal(values.journal);
  try {
    const notes = await rereadUnfinished(journal, values);
    const entries = journal.list();
    if (values.json) {
      process.stdout.write(JSON.stringify(entries, null, 2) + '\n');
      return 0;
    }
    if (!entries.length) {
      err(`The journal ${journal.path} is empty.`);
      return 0;
    }
    const rows = entries.map((e: JournalEntry) => [
      e.taskId ?? `(call ${e.callId.slice(0, 8)})`,
      e.state + (e.finishedAt && !e.readAt ? ' (unread)' : '') + (e.cancelRequestedAt && !e.finishedAt ? ' (cancel requested)' : ''),
      e.tool,
      age(e.createdAt),
      shortServerLabel(e.serverUrl),
      [notes.has(e.callId) ? `(${notes.get(e.callId)})` : '', e.statusMessage ?? ''].filter(Boolean).join(' '),
    ]);
    const columns = [{ header: 'TASK' }, { header: 'STATE', min: 26 }, { header: 'TOOL', min: 12 }, { header: 'AGE' }, { header: 'SERVER', min: 30 }, { header: 'STATUS', min: 6 }];
    process.stdout.write(tableLines(columns, rows, tableWidth(process.stdout)).join('\n') + '\n');
    return 0;
  } finally {
    journal.close();
  }
}

export async function resume(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'resume', ['env', 'url']);
  if (positionals.length > 1) throw new UsageError('usage: outlast resume [TASK_ID] [--url URL]');
  const id = positionals[0];
  const urls = replicaUrls(values);
  if (urls && id === undefined) throw new UsageError("--url names the replicas of one task's server: give the task too (outlast resume TASK_ID --url URL)");
  let blocked!: () => void;
  const ui = makeUi(values, () => blocked());
  const journal = openJournal(values.journal);
  const clients: TaskClient[] = [];
  const handles: TaskCall[] = [];
  const blockedP = new Promise<'blocked'>((r) => (blocked = () => r('blocked')));
  const off = onInterrupt(() => handles, () => clients, !!values['cancel-on-interrupt'], ui.status);
  try {
    let entries: JournalEntry[];
    if (id !== undefined) {
      entries = journal.find(id);
      if (!entries.length) throw new Exit(2, `No task or call "${id}" in the journal ${journal.path} (see outlast tasks)`);
      if (entries.length > 1 && !entries.every((e) => e.taskId === entries[0]!.taskId)) {
        throw new Exit(2, `"${id}" matches several entries (${entries.map((e) => e.taskId ?? e.callId).join(', ')}); give more of the id`);
      }
      entries = [entries[0]!];
    } else {
      entries = journal.pending();
      if (!entries.length) {
        err(`Nothing to resume: every call in ${journal.path} is finished and read.`);
        if (values.json) process.stdout.write('[]\n');
        return 0;
      }
    }
    const byServer = new Map<string, JournalEntry[]>();
    for (const e of entries) byServer.set(e.serverUrl, [...(byServer.get(e.serverUrl) ?? []), e]);
    for (const [server, all] of byServer) {
      let list = all;
      const open = list.filter((e) => UNFINISHED_STATES.includes(e.state));
      let client: TaskClient | undefined;
      if (parseStdioTarget(server)) {
        if (urls) throw new UsageError(`--url names replicas of a server reached by URL; task ${id} is on the stdio server ${serverLabel(server)}`);
      } else if (open.length) {
        // Reach the server (or the first of --url's replicas) before following anything: one that does not answer is
        // named at once, with the way to give another, instead of after every call's retries.
        const first = open[0]!;
        try {
          client = await firstAnswering(urls ?? [server], (u) => cliClient(u, journal, ui, values, server), probeFor(first.taskId), anotherReplica('resume', first.taskId ?? first.callId), (l) => ui.status.say(l));
        } catch (x) {
          if (id !== undefined) {
            if (values.json) process.stdout.write(JSON.stringify(errorJson(x as Error)) + '\n');
            throw x;
          }
          err((x as Error).message);
          list = list.filter((e) => !open.includes(e)); // its outcomes already journaled are still shown
        }
      }
      client ??= cliClient(server, journal, ui, values);
      clients.push(client);
      for (const e of list) {
        try {
          handles.push(...(await client.resume(e.callId, printOutput(ui, !!values.json, entries.length > 1))));
        } catch (x) {
          err(`${e.taskId ?? e.callId}: ${(x as Error).message}`);
        }
      }
    }
    const many = handles.length > 1;
    if (many) err(`Resuming ${handles.length} calls`);
    const all = Promise.all(handles.map((h) => follow(h, ui, many ? `[${(h.taskId ?? h.callId).slice(0, 8)}] ` : '')));
    const r = await Promise.race([all, blockedP]);
    ui.status.stop();
    if (r === 'blocked') {
      for (const h of handles) h.detach();
      const blockedOn = entries.find((e) => e.taskId !== undefined && e.taskId === ui.needsInput?.taskId);
      throw blockedExit(ui, blockedOn !== undefined && parseStdioTarget(blockedOn.serverUrl) !== undefined);
    }
    let code = handles.length === entries.length ? 0 : 1;
    if (values.json) {
      const out = r.map(outcomeJson);
      process.stdout.write(JSON.stringify(id !== undefined ? out[0] ?? null : out) + '\n');
    }
    for (const f of r) {
      if (f.error instanceof DetachedError) {
        code = Math.max(code, EXIT_INTERRUPT);
        continue;
      }
      const heading = many || id === undefined ? `== ${f.call.taskId ?? f.call.callId} (${f.call.tool}) ${f.result ? (f.result.isError ? 'completed with a tool error' : 'completed') : 'ended'}` : undefined;
      code = Math.max(code, report(f, !!values.json, heading));
    }
    return code;
  } finally {
    off();
    ui.status.stop();
    for (const c of clients) await c.close();
    journal.close();
  }
}

/** How to give another replica, for a command on task `id`. */
const anotherReplica = (command: string, id: string) => `give another replica with --url URL (outlast ${command} ${id} --url URL)`;

/**
 * The journal's entry for a task id (or a unique prefix), and a TaskClient for its server: the journaled one, or the
 * first of --url that answers (a replica of it; the journal keeps the entry under the server it was made on).
 */
async function clientForTask(command: string, id: string, journal: Journal, values: { url?: string[] | undefined } & ServerFlagValues, extra: { retry?: { attempts: number } }) {
  const entries = journal.find(id).filter((e) => e.taskId);
  const entry = entries.find((e) => e.taskId === id) ?? (entries.length === 1 ? entries[0] : undefined);
  const taskId = entry?.taskId ?? id;
  const urls = replicaUrls(values);
  const server = entry?.serverUrl;
  if (!urls && !server) throw new Exit(2, `No task "${id}" in the journal ${journal.path}; give the server with --url URL`);
  const make = (target: string) => {
    try {
      return new TaskClient({ ...reach(target, values), ...(server && target !== server ? { replicaOf: server } : {}), journal, clientInfo: { name: 'outlast-cli', version: '0.1.0' }, ...extra });
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
  };
  if (server && parseStdioTarget(server)) {
    if (urls) throw new UsageError(`--url names replicas of a server reached by URL; task ${taskId} is on the stdio server ${serverLabel(server)}`);
    return { entry, taskId, client: make(server) };
  }
  const client = await firstAnswering(urls ?? [server!], make, probeFor(taskId), anotherReplica(command, taskId), err);
  return { entry, taskId, client };
}

/**
 * Runs `fn` with a client for task `id`'s server (clientForTask), then closes both: an Exit passes through, a task the
 * server no longer knows is marked so in the journal, any other failure is exit 1 with its message.
 */
async function withTaskClient(
  command: string,
  id: string,
  values: { journal?: string | undefined; url?: string[] | undefined } & ServerFlagValues,
  extra: { retry?: { attempts: number } },
  fn: (c: { entry: JournalEntry | undefined; taskId: string; client: TaskClient; journal: Journal }) => Promise<number>,
): Promise<number> {
  const journal = openJournal(values.journal);
  try {
    const { entry, taskId, client } = await clientForTask(command, id, journal, values, extra);
    try {
      return await fn({ entry, taskId, client, journal });
    } catch (e) {
      if (e instanceof Exit) throw e;
      if (e instanceof TaskGoneError && entry) journal.gone(entry.callId, e.reason, e.message);
      throw new Exit(1, (e as Error).message);
    } finally {
      await client.close();
    }
  } finally {
    journal.close();
  }
}

export async function cancel(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'cancel', ['url', 'env']);
  const id = positionals[0];
  if (!id || positionals.length > 1) throw new UsageError('usage: outlast cancel TASK_ID [--url URL]');
  return withTaskClient('cancel', id, values, { retry: { attempts: 3 } }, async ({ taskId, client }) => {
    await client.cancel(taskId);
    err(`Cancellation of task ${taskId} requested; the server stops it cooperatively (it may still finish first). See how it ended: outlast resume ${taskId}`);
    return 0;
  });
}

/** A task's final state as `call` shows it, and the exit code `call` gives for it. */
function finalState(t: DetailedTask): { line: string; code: number } {
  const line = `task ${t.taskId} ${t.status}${t.statusMessage ? `: ${t.statusMessage}` : ''}`;
  if (t.status === 'completed') return { line, code: (t.result as CallToolResult | undefined)?.isError ? 1 : 0 };
  if (t.status === 'failed') return { line: `${line} (${t.error.message}, code ${t.error.code})`, code: 1 };
  return { line, code: 1 };
}

/** `outlast logs TASK_ID [--follow] [--after N]`: a task's output, like `docker logs`; --follow ends with its final state. */
export async function logs(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'logs', ['url', 'follow', 'after', 'env']);
  const id = positionals[0];
  if (!id || positionals.length > 1) throw new UsageError('usage: outlast logs TASK_ID [--follow] [--after N] [--url URL]');
  let after = 0;
  if (values.after !== undefined) {
    after = Number(values.after);
    if (!/^\d+$/.test(values.after) || !Number.isSafeInteger(after)) throw new UsageError(`--after must be an integer >= 0 (a sequence number); got "${values.after}"`);
  }
  return withTaskClient('logs', id, values, {}, async ({ entry, taskId, client, journal }) => {
    // Without --follow: what exists now (tasks/get says how much), then stop.
    const until = values.follow ? Infinity : (await latestOutputSeq(client.dispatcher, taskId)).seq;
    if (until <= after) return 0;
    for await (const e of client.output(taskId, { after, onGap: (g) => err(gapLine(g)) })) {
      process.stdout.write(outputLine(e) + '\n');
      if (e.seq >= until) break;
    }
    if (!values.follow) return 0;
    // The output ends when the task does: say how, as `call` would, and keep the journal's entry up to date.
    const final = await client.getTask(taskId);
    if (entry) journal.record(entry.callId, final);
    const { line, code } = finalState(final);
    err(line);
    return code;
  });
}

/** `outlast answer TASK_ID ANSWERS_JSON`: answers the form questions a task waits on, by input key or field. */
export async function answer(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'answer', ['url', 'env']);
  const [id, json, ...more] = positionals;
  if (!id || json === undefined) throw new UsageError('usage: outlast answer TASK_ID ANSWERS_JSON [--url URL] (e.g. outlast answer T \'{"approve": true}\')');
  if (more.length) throw new UsageError(`unexpected argument "${more[0]}"; ANSWERS_JSON must be one quoted JSON object`);
  if (values.answers !== undefined) throw new UsageError('outlast answer takes its answers as ANSWERS_JSON, not --answers');
  let answers: Answers;
  try {
    answers = answersFromJson(json);
  } catch (e) {
    throw new UsageError((e as Error).message.replace('--answers', 'ANSWERS_JSON'));
  }
  return withTaskClient('answer', id, values, {}, async ({ entry, taskId, client, journal }) => {
    const t = await client.getTask(taskId);
    if (t.status !== 'input_required') throw new Exit(1, `task ${taskId} is ${t.status}: it waits for no answer`);
    const responses: JsonObject = {};
    const unanswered: string[] = [];
    for (const [key, req] of Object.entries(t.inputRequests)) {
      const params = (req.params ?? {}) as JsonObject;
      const r = req.method === 'elicitation/create' && params.mode !== 'url' ? resolveAnswer(answers, key, params) : undefined;
      if (r && 'error' in r) throw new Exit(2, `ANSWERS_JSON: ${r.error}`);
      if (r && 'response' in r) responses[key] = r.response;
      else unanswered.push(`"${key}" (${req.method === 'elicitation/create' ? `${String(params.message ?? '')}${r && 'missing' in r ? `; fields: ${r.missing.join(', ')}` : ''}` : `${req.method}, which the CLI cannot answer`})`);
    }
    const keys = Object.keys(responses);
    if (!keys.length) throw new Exit(2, `ANSWERS_JSON answers none of the questions task ${taskId} waits on: ${unanswered.join('; ')}`);
    // Journaled before they are sent, as TaskClient does, so a crash in between does not lose them.
    for (const key of keys) if (entry) journal.saveAnswer(entry.callId, key, responses[key] as JsonObject);
    await client.dispatcher.request('tasks/update', { taskId, inputResponses: responses });
    for (const key of keys) if (entry) journal.answerSent(entry.callId, key);
    err(`answered ${keys.map((k) => `"${k}"`).join(', ')} of task ${taskId}${unanswered.length ? `; still waiting on ${unanswered.join('; ')}` : ''}; follow it with: outlast resume ${taskId}`);
    return 0;
  });
}

/** Runs a client command and turns its outcome into an exit code (errors printed to stderr). */
export async function runClientCommand(fn: (argv: string[]) => Promise<number>, argv: string[]): Promise<never> {
  let code: number;
  try {
    code = await fn(argv);
  } catch (e) {
    if (e instanceof Exit) {
      if (e.message) err(`outlast: ${e.message}`);
      code = e.code;
    } else if (e instanceof HelpRequested) {
      process.stdout.write(CLIENT_HELP);
      code = 0;
    } else if (e instanceof UsageError) {
      err(e.message.startsWith('outlast ') ? e.message : `outlast: ${e.message}`);
      code = 2;
    } else if (e instanceof TransportError || e instanceof RpcError) {
      err(`outlast: ${e.message}`);
      code = 1;
    } else {
      err(`outlast: ${(e as Error)?.stack ?? String(e)}`);
      code = 1;
    }
  }
  process.exit(code);
}
