/**
 * TaskClient over stdio: stdio-process.ts spawns the server and frames its messages (as it does for the gateway's
 * upstreams); this channel adds what a durable client needs around it, so the raw dispatcher (transport.ts) runs over
 * it as over HTTP:
 * - a command that cannot start, or a server that exits, is a TransportError naming the command, its exit code (or
 *   signal) and the last lines it wrote on stderr: every pending and later request fails with it, none hangs;
 * - the server's stderr goes through to this process's stderr (or to a callback, or nowhere), and so does a line on
 *   its stdout that is not JSON-RPC (marked as such); the last of them are kept for those errors;
 * - close() stops the server (stdin closed, then SIGTERM, then SIGKILL) and waits until it is gone.
 *
 * What the journal records of a stdio server (`stdioTarget`): the command, its arguments and its absolute working
 * directory, never its environment (it may hold secrets); `resume` starts the same command there again and the
 * server finds its tasks in its own store.
 */
import { resolve } from 'node:path';
import type { JsonObject } from '../protocol/index.js';
import { TransportError } from './errors.js';
import { commandLine, StdioProcess } from './stdio-process.js';
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

export class StdioChannel implements MessageChannel {
  readonly target: string;
  onmessage?: (message: JsonObject) => void;
  onclose?: (error: TransportError) => void;
  private readonly process: StdioProcess;
  private readonly shown: string;
  /** Set once the process is gone (or could not start): every later send fails with it. */
  private lost: TransportError | undefined;
  private closing = false;

  constructor(options: StdioServerOptions) {
    if (typeof options.command !== 'string' || !options.command.trim()) throw new TypeError('stdio: give the command that starts the server');
    this.target = stdioTarget(options);
    const spec = parseStdioTarget(this.target)!;
    this.shown = commandLine(options.command, options.args);
    const to = options.stderr ?? 'inherit';
    const show = typeof to === 'function' ? to : to === 'inherit' ? (line: string) => process.stderr.write(line + '\n') : undefined;
    this.process = new StdioProcess({
      command: options.command,
      args: spec.args,
      cwd: spec.cwd,
      ...(options.env ? { env: options.env } : {}),
      ...(show ? { onStderrLine: show, onGarbage: (line: string) => show(`(on stdout, not JSON-RPC) ${line}`) } : {}),
    });
    this.process.onmessage = (m) => this.onmessage?.(m as unknown as JsonObject);
    this.process.onerror = () => undefined; // stdin EPIPE: the process's end says what happened
    this.process.onclose = () => this.ended();
  }

  /** The server's process id while it runs. */
  get pid(): number | undefined {
    return this.process.pid;
  }

  async start(): Promise<void> {
    try {
      await this.process.start();
    } catch (e) {
      // Why it did not start, in words (Node's spawn error is its cause): the request was never sent.
      throw (this.lost = new TransportError(`Cannot start the stdio server "${this.shown}": ${(e as Error).message}`, { cause: e, retryable: false }));
    }
  }

  send(message: JsonObject): Promise<void> {
    if (this.lost) return Promise.reject(this.lost);
    return this.process.send(message as never).catch((e: unknown) => {
      throw this.lost ?? new TransportError(`stdio server "${this.shown}": ${(e as Error).message}`, { cause: e, retryable: false });
    });
  }

  /** Stops the server (stdin closed, then SIGTERM, then SIGKILL) and waits until it is gone. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.lost ??= new TransportError(`The stdio server "${this.shown}" was stopped (the client closed)`, { retryable: false });
    await this.process.close();
  }

  /** The process is gone: one error, on one line, for everything pending and everything after. */
  private ended(): void {
    if (this.closing || this.lost) return; // stopped by close(), or it never started (start() said why)
    this.lost = new TransportError(`The stdio server "${this.shown}" ${this.process.describeEnd()}`, { retryable: false });
    this.onclose?.(this.lost);
  }
}
