/**
 * TaskClient over stdio: the official SDK v2 client's `StdioClientTransport` spawns the server and frames its
 * messages; this channel adds what a durable client needs around it, so the raw dispatcher (transport.ts) runs over
 * it as over HTTP:
 * - a command that cannot start, or a server that exits, is a TransportError naming the command, its exit code (or
 *   signal) and the last lines it wrote on stderr: every pending and later request fails with it, none hangs;
 * - the server's stderr goes through to this process's stderr (or to a callback, or nowhere) and its tail is kept
 *   for those errors;
 * - close() stops the server (stdin closed, then SIGTERM, then SIGKILL: the SDK's sequence) and waits until it is gone.
 *
 * What the journal records of a stdio server (`stdioTarget`): the command, its arguments and its absolute working
 * directory, never its environment (it may hold secrets); `resume` starts the same command there again and the
 * server finds its tasks in its own store.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import type { JsonObject } from '../protocol/index.js';
import { TransportError } from './errors.js';
import type { MessageChannel } from './transport.js';

export interface StdioServerOptions {
  /** The executable (looked up on PATH); no shell runs it. */
  command: string;
  args?: string[];
  /** Variables for the server on top of the SDK's small default set (HOME, LOGNAME, PATH, SHELL, TERM, USER): the
   *  server does not inherit the rest of this process's environment. Never journaled. */
  env?: Record<string, string>;
  /** The server's working directory (default: this process's); journaled as an absolute path. */
  cwd?: string;
  /** The server's stderr: 'inherit' (default: this process's stderr), 'ignore', or a function given each line. The
   *  last lines are kept for error messages either way. */
  stderr?: 'inherit' | 'ignore' | ((line: string) => void);
}

/** What the journal names a stdio server by: the command, arguments and absolute cwd (not the environment). */
export interface StdioTarget {
  command: string;
  args: string[];
  cwd: string;
}

const PREFIX = 'stdio:';
/** Lines of the server's stderr kept for error messages. */
const TAIL_LINES = 5;
const TAIL_LINE_CHARS = 300;
/** After the SDK's close sequence (stdin end, SIGTERM, SIGKILL), how long to wait for the process to be gone. */
const GONE_MS = 3000;

/** The journal's server key for a stdio server (a `stdio:` prefix and JSON, so it never reads as a URL). */
export function stdioTarget(options: Pick<StdioServerOptions, 'command' | 'args' | 'cwd'>): string {
  const t: StdioTarget = { command: options.command, args: options.args ?? [], cwd: resolve(options.cwd ?? process.cwd()) };
  return PREFIX + JSON.stringify(t);
}

/** The stdio server a journal key names, or undefined for a URL. */
export function parseStdioTarget(key: string): StdioTarget | undefined {
  if (!key.startsWith(PREFIX)) return undefined;
  try {
    const t = JSON.parse(key.slice(PREFIX.length)) as Partial<StdioTarget>;
    if (typeof t.command === 'string' && Array.isArray(t.args) && t.args.every((a) => typeof a === 'string') && typeof t.cwd === 'string') {
      return { command: t.command, args: t.args, cwd: t.cwd };
    }
  } catch {
    /* not ours */
  }
  return undefined;
}

/** A command line as a person reads it (for messages): arguments with spaces or quotes quoted. */
export function commandLine(command: string, args: readonly string[] = []): string {
  return [command, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

export class StdioChannel implements MessageChannel {
  readonly target: string;
  onmessage?: (message: JsonObject) => void;
  onclose?: (error: TransportError) => void;
  private readonly transport: StdioClientTransport;
  private readonly spec: StdioTarget;
  private readonly shown: string;
  private readonly tail: string[] = [];
  private partial = '';
  private child: ChildProcess | undefined;
  /** Set once the process is gone (or could not start): every later send fails with it. */
  private lost: TransportError | undefined;
  private closing = false;

  constructor(private readonly options: StdioServerOptions) {
    if (typeof options.command !== 'string' || !options.command.trim()) throw new TypeError('stdio: give the command that starts the server');
    this.target = stdioTarget(options);
    this.spec = parseStdioTarget(this.target)!;
    this.shown = commandLine(options.command, options.args);
    this.transport = new StdioClientTransport({
      command: options.command,
      args: this.spec.args,
      cwd: this.spec.cwd,
      ...(options.env ? { env: options.env } : {}),
      stderr: 'pipe', // always read: its tail goes into errors
    });
    this.transport.stderr?.on('data', (chunk: Buffer) => this.onStderr(chunk.toString('utf8')));
    this.transport.onmessage = (m) => this.onmessage?.(m as unknown as JsonObject);
    this.transport.onerror = () => undefined; // stdin EPIPE, unparsable lines: the process's end says what happened
    this.transport.onclose = () => this.ended();
  }

  /** The server's process id while it runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  async start(): Promise<void> {
    try {
      await this.transport.start();
    } catch (e) {
      // Node's spawn error (syscall "spawn …"), kept as the cause: the request was never sent.
      const code = (e as NodeJS.ErrnoException).code;
      const noDir = !existsSync(this.spec.cwd) || !statSync(this.spec.cwd).isDirectory();
      const why = noDir
        ? `its working directory ${this.spec.cwd} does not exist`
        : code === 'ENOENT'
          ? `"${this.options.command}" was not found (ENOENT; is it on PATH?)`
          : code === 'EACCES'
            ? `"${this.options.command}" is not executable (EACCES)`
            : (e as Error).message;
      throw (this.lost = new TransportError(`Cannot start the stdio server "${this.shown}": ${why}`, { cause: e, retryable: false }));
    }
    // The SDK keeps the ChildProcess to itself; its exit code and signal are what an error must name.
    this.child = (this.transport as unknown as { _process?: ChildProcess })._process;
  }

  send(message: JsonObject): Promise<void> {
    if (this.lost) return Promise.reject(this.lost);
    return this.transport.send(message as never).catch((e: unknown) => {
      throw this.lost ?? new TransportError(`stdio server "${this.shown}": ${(e as Error).message}`, { cause: e, retryable: false });
    });
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.lost ??= new TransportError(`The stdio server "${this.shown}" was stopped (the client closed)`, { retryable: false });
    const child = this.child;
    await this.transport.close();
    if (child && child.exitCode === null && child.signalCode === null) {
      // The SDK sent SIGKILL last and does not wait for it.
      await new Promise<void>((r) => {
        const t = setTimeout(r, GONE_MS);
        child.once('exit', () => (clearTimeout(t), r()));
      });
    }
  }

  private onStderr(text: string): void {
    const lines = (this.partial + text).split('\n');
    this.partial = lines.pop()!;
    for (const line of lines) this.line(line.replace(/\r$/, ''));
  }

  private line(line: string): void {
    if (line.trim()) {
      this.tail.push(line.length > TAIL_LINE_CHARS ? `${line.slice(0, TAIL_LINE_CHARS)}…` : line);
      if (this.tail.length > TAIL_LINES) this.tail.shift();
    }
    const to = this.options.stderr ?? 'inherit';
    if (typeof to === 'function') to(line);
    else if (to === 'inherit') process.stderr.write(line + '\n');
  }

  /** The process is gone: one error, on one line, for everything pending and everything after. */
  private ended(): void {
    if (this.partial) this.line(this.partial);
    this.partial = '';
    if (this.closing || this.lost) return; // stopped by close(), or it never started (start() said why)
    const c = this.child;
    const how = c?.signalCode ? `was killed by ${c.signalCode}` : `exited with code ${c?.exitCode ?? '?'}`;
    const said = this.tail.length ? `; its last stderr lines: ${this.tail.join(' | ')}` : '; it wrote nothing on stderr';
    this.lost = new TransportError(`The stdio server "${this.shown}" ${how}${said}`, { retryable: false });
    this.onclose?.(this.lost);
  }
}
