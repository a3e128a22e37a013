/**
 * `outlast gateway --config FILE`: the upstreams as hosts already describe their servers, the `mcpServers` JSON of
 * Claude Desktop and Cursor (VS Code's `servers` too): `{"NAME": {"command", "args", "env", "cwd"}}` for a stdio
 * server, `{"NAME": {"url", "headers"}}` for a Streamable HTTP one (`"type"` may say which); `${VAR}` in a value is
 * taken from the gateway's environment, and what it became is kept in the spec's `secrets`, never shown
 * (gateway/secrets.ts). Each mistake is a UsageError naming the server; values of `env` and `headers` are
 * never quoted (they are often secrets).
 */
import { readFileSync } from 'node:fs';
import { upstreamNameProblem, type UpstreamSpec } from '../gateway/index.js';
import { UsageError } from './usage.js';

/** A server's name: its tools' prefix when the file has several. */
const NAME = /^[A-Za-z0-9_-]{1,32}$/;

/** `text` as an http(s) URL, or a UsageError saying `what` must be one (quoting it unless `quote` is false: a URL in
 *  the file may carry a credential). */
export function httpUrlOf(text: string, what: string, quote = true): string {
  const got = quote ? `, got "${text}"` : '';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`${what} must be a URL${got}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError(`${what} must be an http:// or https:// URL${got}`);
  return url.href;
}

/** The environment `${VAR}`s are read from, and what each became (the server's secrets, never shown). */
interface Expansion {
  env: NodeJS.ProcessEnv;
  values: string[];
}

/** `${VAR}`, `${env:VAR}` (VS Code's spelling) and `${VAR:-default}` in a value, from the gateway's environment, so
 *  secrets stay out of the file as hosts allow; a variable that is not set (with no default) is a UsageError naming
 *  it, never a silent empty string. */
function expanded(text: string, what: string, x: Expansion): string {
  return text.replace(/\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_, name: string, fallback: string | undefined) => {
    const value = env(x, name) ?? fallback;
    if (value === undefined) throw new UsageError(`${what} names \${${name}}, which is not set in the gateway's environment`);
    x.values.push(value);
    return value;
  });
}

/** `--header` and `--env` values with their `${VAR}`s taken from the gateway's environment (so a secret, single-quoted
 *  on the command line, stays out of it), and what each became (the upstream's secrets). */
export function expandedFlagValues(values: Record<string, string>, flag: string, from: NodeJS.ProcessEnv = process.env): { values: Record<string, string>; secrets: string[] } {
  const x: Expansion = { env: from, values: [] };
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(values)) out[k] = expanded(v, `${flag} "${k}"`, x);
  return { values: out, secrets: x.values };
}

function env(x: Expansion, name: string): string | undefined {
  const value = x.env[name];
  return value !== undefined && value !== '' ? value : undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** An object of strings (env, headers), variables expanded, or a UsageError naming the first key whose value is not one. */
function stringsOf(v: unknown, what: string, x: Expansion): Record<string, string> {
  if (v === undefined) return {};
  if (!isObject(v)) throw new UsageError(`${what} must be an object of strings`);
  const out: Record<string, string> = {};
  for (const [k, value] of Object.entries(v)) {
    if (typeof value !== 'string') throw new UsageError(`${what}: "${k}" must be a string`);
    out[k] = expanded(value, `${what}: "${k}"`, x);
  }
  return out;
}

export function readGatewayConfig(file: string, env: NodeJS.ProcessEnv = process.env): UpstreamSpec[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`--config: cannot read "${file}" (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`--config ${file} is not JSON: ${(e as Error).message.split('\n')[0]}`);
  }
  const servers = isObject(json) ? (json.mcpServers ?? json.servers) : undefined;
  const specs: UpstreamSpec[] = [];
  for (const [name, s] of Object.entries(isObject(servers) ? servers : {})) {
    const what = `--config ${file}: server "${name}"`;
    const x: Expansion = { env, values: [] };
    const secrets = () => (x.values.length ? { secrets: [...new Set(x.values)] } : {});
    if (!NAME.test(name)) throw new UsageError(`${what}: a server's name must be 1 to 32 letters, digits, "_" or "-"`);
    if (upstreamNameProblem(name)) throw new UsageError(`${what}: a server's name may not contain "__" or end in "_" ("__" separates it from its tools' and prompts' names)`);
    if (!isObject(s)) throw new UsageError(`${what} must be an object`);
    if (s.disabled === true) continue;
    const type = s.type;
    if (type === 'sse') throw new UsageError(`${what}: "type": "sse" (the old HTTP+SSE transport) is not supported; give its Streamable HTTP URL ("type": "http")`);
    if (type !== undefined && type !== 'stdio' && type !== 'http' && type !== 'streamable-http' && type !== 'streamableHttp') {
      throw new UsageError(`${what}: "type" must be "stdio", "http" or "streamable-http", got ${JSON.stringify(type)}`);
    }
    if (s.command !== undefined && s.url !== undefined) throw new UsageError(`${what} has both "command" and "url"; give one`);
    if (s.command === undefined && s.url === undefined) throw new UsageError(`${what} has neither "command" (a stdio server) nor "url" (a Streamable HTTP server)`);
    if (s.command !== undefined) {
      if (type !== undefined && type !== 'stdio') throw new UsageError(`${what}: "type": "${type}" needs "url", not "command"`);
      if (typeof s.command !== 'string' || !s.command) throw new UsageError(`${what}: "command" must be a non-empty string`);
      if (s.args !== undefined && (!Array.isArray(s.args) || s.args.some((a) => typeof a !== 'string'))) throw new UsageError(`${what}: "args" must be an array of strings`);
      if (s.cwd !== undefined && typeof s.cwd !== 'string') throw new UsageError(`${what}: "cwd" must be a string`);
      const vars = stringsOf(s.env, `${what}: "env"`, x);
      const args = ((s.args as string[] | undefined) ?? []).map((a, i) => expanded(a, `${what}: "args"[${i}]`, x));
      const command = expanded(s.command, `${what}: "command"`, x);
      const cwd = s.cwd ? { cwd: expanded(s.cwd as string, `${what}: "cwd"`, x) } : {};
      specs.push({ kind: 'stdio', name, command, args, env: vars, ...cwd, ...secrets() });
    } else {
      if (type === 'stdio') throw new UsageError(`${what}: "type": "stdio" needs "command", not "url"`);
      if (typeof s.url !== 'string') throw new UsageError(`${what}: "url" must be a string`);
      const url = httpUrlOf(expanded(s.url, `${what}: "url"`, x), `${what}: "url"`, false);
      specs.push({ kind: 'http', name, url, headers: stringsOf(s.headers, `${what}: "headers"`, x), ...secrets() });
    }
  }
  if (!specs.length) throw new UsageError(`--config ${file} names no servers; it needs {"mcpServers": {"NAME": {"command": …} or {"url": …}}}`);
  return specs;
}
