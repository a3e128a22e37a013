/**
 * The client transport to a stdio upstream: the SDK's framing (`serializeMessage`, `deserializeMessage`) over a
 * process we spawn ourselves, because the SDK's StdioClientTransport drops what is not JSON silently and does not
 * say how its process ended. Here a line that is not JSON-RPC is reported (`onGarbage`: a banner before a proper
 * answer is tolerated, a stream of nothing else is an error the connection names), and the exit code or signal is
 * kept for the reason a lost call gives. Its stderr goes to `onStderr`.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { deserializeMessage, serializeMessage, type JSONRPCMessage, type Transport } from '@modelcontextprotocol/client';

export interface StdioUpstreamParams {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd?: string;
}

export class UpstreamStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  /** A line on stdout that is not a JSON-RPC message. */
  onGarbage?: (line: string) => void;
  /** What the process writes on its stderr. */
  onStderr?: (chunk: Buffer) => void;
  /** How the process ended, once it did. */
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  private child: ChildProcessWithoutNullStreams | undefined;
  private partial = '';

  constructor(private readonly params: StdioUpstreamParams) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.params.command, this.params.args, {
        env: this.params.env,
        ...(this.params.cwd ? { cwd: this.params.cwd } : {}),
        stdio: ['pipe', 'pipe', 'pipe'],
        windowsHide: true,
      });
      this.child = child;
      child.once('spawn', () => resolve());
      child.once('error', (e) => {
        if (child.pid === undefined) reject(e);
        else this.onerror?.(e);
      });
      // The process's exit ends the connection, once its stdout was read to the end (or shortly after): 'close' alone
      // could wait for a helper process that inherited its stderr.
      let closed = false;
      const close = () => {
        if (closed) return;
        closed = true;
        this.onclose?.();
      };
      const stdoutEnded = new Promise<void>((r) => child.stdout.once('end', () => r()));
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        void Promise.race([stdoutEnded, new Promise<void>((r) => setTimeout(r, 200).unref())]).then(close);
      });
      child.once('close', close);
      child.stdin.on('error', (e) => this.onerror?.(e));
      child.stdout.on('data', (d: Buffer) => this.read(d.toString('utf8')));
      child.stderr.on('data', (d: Buffer) => this.onStderr?.(d));
    });
  }

  private read(text: string): void {
    const lines = (this.partial + text).split('\n');
    this.partial = lines.pop() ?? '';
    for (const raw of lines) {
      const line = raw.replace(/\r$/, '');
      if (!line.trim()) continue;
      let message: JSONRPCMessage;
      try {
        message = deserializeMessage(line);
      } catch {
        this.onGarbage?.(line);
        continue;
      }
      this.onmessage?.(message);
    }
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin;
    if (!stdin || stdin.destroyed) return Promise.reject(new Error('the upstream process is not running'));
    return new Promise((resolve, reject) => {
      stdin.write(serializeMessage(message), (e) => (e ? reject(e) : resolve()));
    });
  }

  /** Ends its stdin (a stdio server's signal to stop), then SIGTERM after 2 s, SIGKILL after 2 more. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((r) => child.once('exit', () => r()));
    const within = (ms: number) => Promise.race([gone.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms).unref())]);
    child.stdin.end();
    if (await within(2000)) return;
    child.kill('SIGTERM');
    if (await within(2000)) return;
    child.kill('SIGKILL');
    await gone;
  }
}
