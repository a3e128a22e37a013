/**
 * A stdio MCP server as a child process, for both clients that start one: TaskClient's stdio channel
 * (stdio-transport.ts) and the gateway's upstream connections (gateway/upstream.ts, an SDK `Client` over it).
 * It spawns (cross-spawn, as the SDK does, so `npx`-style shims start on Windows too) and frames with the SDK's
 * `serializeMessage`/`deserializeMessage`, but unlike the SDK's StdioClientTransport it:
 * - names what is not JSON-RPC on stdout (`onGarbage`) instead of dropping it silently;
 * - keeps how the process ended (exit code or signal) and the last lines of its stderr, for the reason an error gives;
 * - explains a command that cannot start (not on PATH, not executable, no such working directory);
 * - ends the connection when the process exits and its output is read (not when a helper process that inherited its
 *   pipes lets go of them), and close() waits until the process is gone.
 * The environment is the SDK's small default set (`getDefaultEnvironment`: HOME, LOGNAME, PATH, SHELL, TERM, USER)
 * plus what is given: the server does not inherit the rest of this process's environment.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import spawn from 'cross-spawn';
import { deserializeMessage, serializeMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE, type JSONRPCMessage, type Transport } from '@modelcontextprotocol/client';
import { getDefaultEnvironment } from '@modelcontextprotocol/client/stdio';
import { StderrCause } from './stderr-cause.js';

export interface StdioProcessOptions {
  /** The executable (looked up on PATH); no shell runs it. */
  command: string;
  args?: readonly string[];
  /** Variables on top of the SDK's default safe set. */
  env?: Record<string, string>;
  /** The working directory (default: this process's). */
  cwd?: string;
  /** Each line the process writes on stderr (empty lines included). */
  onStderrLine?: (line: string) => void;
  /** Each non-empty line on stdout that is not a JSON-RPC message. */
  onGarbage?: (line: string) => void;
  /** How its own messages name the process (default: its command line; a gateway names its upstream without the
   *  arguments, which may hold secrets). */
  shownAs?: string;
}

/** What describeEnd() quotes of the process's output: its last stderr lines (for the person who started it), or only
 *  the one line that says why it failed, passed through `redact` (for callers of a gateway, who must not read the
 *  upstream's secrets). */
export interface EndWords {
  stderr?: 'tail' | 'cause';
  redact?: (text: string) => string;
}

/** How the process ended. */
export interface StdioExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Lines of stderr kept for error messages, and how much of each. */
const TAIL_LINES = 5;
const LINE_CHARS = 300;
/** After the process exits, how long its stdout and stderr may take to reach their end (a helper process that
 *  inherited them may hold them open). */
const DRAIN_MS = 200;
/** close(): after stdin ends, and again after SIGTERM, how long the process has to go; then after SIGKILL. */
const STOP_STEP_MS = 2000;
const GONE_MS = 3000;

/** A command line as a person reads it (for messages): arguments with spaces or quotes quoted. */
export function commandLine(command: string, args: readonly string[] = []): string {
  return [command, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

const clip = (line: string) => (line.length > LINE_CHARS ? `${line.slice(0, LINE_CHARS)}…` : line);

export class StdioProcess implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** How the process ended, once it did. */
  exit: StdioExit | undefined;
  private child: ChildProcess | undefined;
  private readonly tail: string[] = [];
  private readonly cause = new StderrCause();
  private lastGarbage: string | undefined;
  /** Why this side stopped the process, if it did for a reason of its own (an endless line on stdout). */
  private stoppedBecause: string | undefined;
  private stdoutPartial = '';
  private stderrPartial = '';
  private finished = false;
  private readonly done: Promise<void>;
  private finish!: () => void;

  constructor(private readonly options: StdioProcessOptions) {
    this.done = new Promise((r) => (this.finish = r));
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Its stderr stream (read here, line by line). Its presence also tells the SDK's era probe that this is a stdio
   *  transport, where a probe that goes unanswered means a 2025-11-25 server, not an outage. */
  get stderr(): NodeJS.ReadableStream | null {
    return this.child?.stderr ?? null;
  }

  /** The last non-empty lines of its stderr (at most 5, each cut at 300 characters). */
  get stderrTail(): readonly string[] {
    return this.tail;
  }

  /** Rejects when the command cannot start, with an Error saying why in words (Node's spawn error as its cause). */
  start(): Promise<void> {
    if (this.child) return Promise.reject(new Error('this stdio process was started already'));
    const { command, args = [], env, cwd } = this.options;
    return new Promise((resolveStart, rejectStart) => {
      const child = spawn(command, [...args], {
        env: { ...getDefaultEnvironment(), ...env },
        ...(cwd ? { cwd } : {}),
        stdio: ['pipe', 'pipe', 'pipe'],
        shell: false,
        windowsHide: true,
      });
      this.child = child;
      let spawned = false;
      child.once('spawn', () => {
        spawned = true;
        resolveStart();
      });
      child.on('error', (e) => {
        if (spawned) this.onerror?.(e);
        else {
          this.finished = true;
          this.finish();
          rejectStart(new Error(this.whyNotStarted(e as NodeJS.ErrnoException), { cause: e }));
        }
      });
      const stdout = child.stdout!;
      const stderr = child.stderr!;
      stdout.setEncoding('utf8');
      stderr.setEncoding('utf8');
      stdout.on('data', (text: string) => this.readStdout(text));
      stderr.on('data', (text: string) => this.readStderr(text));
      child.stdin!.on('error', (e) => this.onerror?.(e));
      const drained = Promise.all([stdout, stderr].map((s) => new Promise<void>((r) => (s.readableEnded ? r() : s.once('close', () => r())))));
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        void Promise.race([drained, new Promise<void>((r) => setTimeout(r, DRAIN_MS).unref())]).then(() => this.ended());
      });
      child.once('close', () => spawned && this.ended());
    });
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin;
    if (!stdin || stdin.destroyed || this.finished) return Promise.reject(new Error(`the stdio process "${this.shown}" is not running`));
    return new Promise((resolveSent, rejectSent) =>
      stdin.write(serializeMessage(message), (e) => {
        if (!e) return resolveSent();
        // A closed pipe (EPIPE) means the process is ending: its end (onclose, exit) is reported before this rejects.
        void Promise.race([this.done, new Promise((r) => setTimeout(r, STOP_STEP_MS).unref())]).then(() => rejectSent(e));
      }),
    );
  }

  /** Ends its stdin (a stdio server's signal to stop), then SIGTERM after 2 s, SIGKILL after 2 more, and waits until
   *  it is gone and its end reported (onclose). */
  async close(): Promise<void> {
    const child = this.child;
    if (!child || this.finished) return;
    const within = (ms: number) => Promise.race([this.done.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
    const running = () => child.exitCode === null && child.signalCode === null;
    child.stdin?.end();
    if (await within(STOP_STEP_MS)) return;
    if (running()) child.kill('SIGTERM');
    if (await within(STOP_STEP_MS)) return;
    if (running()) child.kill('SIGKILL');
    await within(GONE_MS);
  }

  /** The one line of its stderr that best says why it failed (stderr-cause.ts), cut at 300 characters. */
  get stderrCause(): string | undefined {
    return this.cause.line;
  }

  /** How the process ended, for a message: "exited with code 3; its last stderr lines: a | b", or with `stderr:
   *  'cause'` "exited with code 1: Error: Cannot find module '/srv/x.js'". */
  describeEnd(o: EndWords = {}): string {
    const redact = o.redact ?? ((t: string) => t);
    const e = this.exit;
    const how = e?.signal ? `was killed by ${e.signal}` : `exited with code ${e?.code ?? '?'}`;
    const cause = this.cause.line;
    const said = !this.tail.length ? '; it wrote nothing on stderr' : o.stderr === 'cause' ? `: ${redact(cause!)}` : `; its last stderr lines: ${this.tail.join(' | ')}`;
    const stdout = this.lastGarbage !== undefined ? `; on stdout, not JSON-RPC: "${redact(this.lastGarbage)}"` : '';
    return `${this.stoppedBecause ? `${this.stoppedBecause}, and ` : ''}${how}${said}${stdout}`;
  }

  private get shown(): string {
    return this.options.shownAs ?? commandLine(this.options.command, this.options.args);
  }

  private whyNotStarted(e: NodeJS.ErrnoException): string {
    const dir = resolve(this.options.cwd ?? process.cwd());
    if (!existsSync(dir) || !statSync(dir).isDirectory()) return `its working directory ${dir} does not exist`;
    if (e.code === 'ENOENT') return `"${this.options.command}" was not found (ENOENT; is it on PATH?)`;
    if (e.code === 'EACCES') return `"${this.options.command}" is not executable (EACCES)`;
    return e.message;
  }

  private readStdout(text: string): void {
    const lines = (this.stdoutPartial + text).split('\n');
    this.stdoutPartial = lines.pop()!;
    for (const line of lines) this.stdoutLine(line);
    if (this.stdoutPartial.length > STDIO_DEFAULT_MAX_BUFFER_SIZE) {
      // The SDK's bound on one message: a line that never ends is not a server to wait for.
      this.stdoutPartial = '';
      this.stoppedBecause ??= `it wrote more than ${STDIO_DEFAULT_MAX_BUFFER_SIZE} characters on stdout without a line end`;
      this.onerror?.(new Error(`the stdio process "${this.shown}" ${this.stoppedBecause}; it is stopped`));
      void this.close();
    }
  }

  private stdoutLine(raw: string): void {
    const line = raw.replace(/\r$/, '');
    if (!line.trim()) return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(line);
    } catch {
      this.lastGarbage = clip(line);
      this.options.onGarbage?.(line);
      return;
    }
    this.onmessage?.(message);
  }

  private readStderr(text: string): void {
    const lines = (this.stderrPartial + text).split('\n');
    this.stderrPartial = lines.pop()!;
    for (const line of lines) this.stderrLine(line);
  }

  private stderrLine(raw: string): void {
    const line = raw.replace(/\r$/, '');
    if (line.trim()) {
      this.tail.push(clip(line));
      if (this.tail.length > TAIL_LINES) this.tail.shift();
      this.cause.see(clip(line));
    }
    this.options.onStderrLine?.(line);
  }

  /** The process is gone and its output read: the last partial lines count, then the connection ends, once. */
  private ended(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.stdoutPartial) this.stdoutLine(this.stdoutPartial);
    if (this.stderrPartial) this.stderrLine(this.stderrPartial);
    this.stdoutPartial = this.stderrPartial = '';
    this.finish();
    this.onclose?.();
  }
}
