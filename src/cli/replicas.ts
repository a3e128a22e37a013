/**
 * Reaching a task's server when it is one of several replicas with no load balancer in front: `--url` names replicas
 * (repeatable, or comma-separated), tried in turn; the first that answers serves the command. A replica that does not
 * answer is named with the reason (the connection error's code) and the way to give another.
 */
import { TransportError } from '../client/errors.js';
import type { TaskClient } from '../client/task-client.js';
import { UsageError } from './usage.js';

/** The URLs `--url` gives, in order, each once; undefined without --url. */
export function replicaUrls(values: { url?: string[] | undefined }): string[] | undefined {
  if (values.url === undefined) return undefined;
  const urls = values.url.flatMap((u) => u.split(',')).map((u) => u.trim()).filter(Boolean);
  if (!urls.length) throw new UsageError('--url needs a URL, e.g. --url http://127.0.0.1:3001/mcp');
  for (const u of urls) if (!/^https?:\/\/[^\s/]/i.test(u)) throw new UsageError(`--url must be an http:// or https:// URL, got "${u}"`);
  return [...new Set(urls)];
}

/** Why a request got no answer, in a word: the connection error's code (ECONNREFUSED, ETIMEDOUT), else the HTTP
 *  status, else the message. */
export function whyNoAnswer(e: Error): string {
  for (let c: unknown = e; c; c = (c as { cause?: unknown }).cause) {
    const code = (c as { code?: unknown }).code;
    if (typeof code === 'string' && /^E[A-Z_]+$/.test(code)) return code;
  }
  const status = (e as TransportError).httpStatus;
  if (status) return `HTTP ${status}`;
  return /\(([A-Z][A-Z_]+)\)/.exec(e.message)?.[1] ?? e.message;
}

/** Undefined when the server answered `probe` (a JSON-RPC error is an answer, e.g. "Task not found"); else why not. */
async function answers(client: TaskClient, probe: (c: TaskClient) => Promise<unknown>, attempts: number): Promise<TransportError | undefined> {
  for (let i = 0; ; i++) {
    try {
      await probe(client);
      return undefined;
    } catch (e) {
      // A refusal a retry cannot fix (HTTP 401, no endpoint) is the server's answer: the command then says what it is.
      if (!(e instanceof TransportError) || !e.retryable) return undefined;
      if (i + 1 >= attempts) return e;
      await new Promise((r) => setTimeout(r, 500 * 2 ** i));
    }
  }
}

/** A probe: `tasks/get` of the task (or `tools/list` for a call that has no task yet), without the client's retries. */
export function probeFor(taskId: string | undefined): (c: TaskClient) => Promise<unknown> {
  return (c) => c.dispatcher.request(taskId ? 'tasks/get' : 'tools/list', taskId ? { taskId } : {});
}

/**
 * The client of the first of `urls` whose server answers `probe`, each tried up to three times; when none answers,
 * a TransportError naming each URL, why, and `hint` (how to give another). The clients that did not answer are closed;
 * `note` hears of each one skipped before one answered.
 */
export async function firstAnswering(urls: string[], make: (url: string) => TaskClient, probe: (c: TaskClient) => Promise<unknown>, hint: string, note: (line: string) => void): Promise<TaskClient> {
  const failures: string[] = [];
  for (const url of urls) {
    const client = make(url);
    const failed = await answers(client, probe, 3);
    if (!failed) {
      if (failures.length) note(`${failures.join('; ')}; using ${url}`);
      return client;
    }
    failures.push(`${url} did not answer (${whyNoAnswer(failed)})`);
    await client.close();
  }
  throw new TransportError(`${failures.join('; ')}; ${hint}`, { retryable: false });
}
