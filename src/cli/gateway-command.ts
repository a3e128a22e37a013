/**
 * `outlast gateway`: serve MCP servers you did not write, durably. The upstream is a stdio command or a Streamable
 * HTTP URL, or several in an `mcpServers` file (gateway-config.ts); the front is `outlast serve`'s (every front flag,
 * the same function: front-command.ts).
 */
import { basename, extname } from 'node:path';
import { Outlast } from '../server/outlast.js';
import { mountGateway, type UpstreamSpec } from '../gateway/index.js';
import { FRONT_OPTIONS, intFlagOf, runFront, type FrontValues } from './front-command.js';
import { STDIO_OPTIONS, envFlags, splitCommandLine } from './stdio-options.js';
import { UsageError } from './usage.js';
import { expandedFlagValues, httpUrlOf, readGatewayConfig } from './gateway-config.js';
import { commandLine } from '../client/stdio-process.js';

export const GATEWAY_HELP = `Usage:
  outlast gateway --stdio "CMD ARGS…" [options]   serve the tools of a stdio MCP server, durably
  outlast gateway --http URL [options]           the same for a Streamable HTTP MCP server
  outlast gateway --config FILE [options]        the servers of an mcpServers JSON file (as Claude Desktop,
                                                 Cursor and VS Code write it); with several, each tool is NAME__tool

Options for gateway (and every option of serve but its --stdio; see docs/gateway.md):
  --stdio "CMD ARGS…"      the upstream's command line, split like a shell splits words (quotes, backslashes),
                           but no shell runs it
  --env K=V                an environment variable of the upstream process (repeatable; it otherwise gets only
                           a safe default set: HOME, PATH, USER, …)
  --cwd DIR                the upstream process's working directory
  --http URL               a Streamable HTTP upstream
  --config FILE            upstreams from {"mcpServers": {"NAME": {"command", "args", "env", "cwd"} or {"url",
                           "headers"}}}; one keeps its tools' names, several serve NAME__tool and NAME__prompt
                           (resources keep their URIs); each has its own pool (--upstream-pool is per upstream)
  --header "K: V"          a header on every request to an HTTP upstream (repeatable), e.g. its credentials:
                           'Authorization: Bearer \${TOKEN}' (single-quoted) reads $TOKEN from the environment,
                           out of the command line (--env values too)
  --upstream-oauth-client-id ID  OAuth client credentials toward an --http upstream: this client's id, its secret
                           in $OUTLAST_UPSTREAM_OAUTH_CLIENT_SECRET; tokens come from the authorization server
                           the upstream names, and are sent to no other than --upstream-oauth-issuer
  --upstream-oauth-issuer URL    the authorization server the credentials belong to (required with the id)
  --upstream-oauth-scope S       the scope to ask for (space-separated scopes)
  --name NAME              the upstream's name in logs and messages (default: from the command or the host)
  --log-upstream-commands  log each upstream's full command line (or URL) once at start, secrets included; by
                           default logs and errors name an upstream by its name and program (or URL without
                           userinfo, query and fragment) and redact its env, header and \${VAR} values
  --upstream-pool N        connections to the upstream per replica, each serving one call at a time
                           (default 4 for --stdio, processes; 16 for --http, sessions); calls beyond them
                           wait for one (the task's status says so)
  --call-timeout-ms N      an upstream call not answered within N ms fails, saying so (default: no deadline
                           beyond the task's TTL)
  --connect-timeout-ms N   how long starting a connection (process and initialize) may take (default 30000)
  --serve-stdio            serve the gateway itself on stdin/stdout (a host that starts it, e.g. Claude Desktop),
                           instead of HTTP (serve's --stdio)
  --retry-safe TOOL        re-run TOOL on another replica when the one running it dies, whatever its annotations
                           say (repeatable; readOnlyHint or idempotentHint tools are re-run anyway); with several
                           upstreams, TOOL is the served name NAME__tool
`;

export const GATEWAY_OPTIONS = {
  ...FRONT_OPTIONS,
  ...STDIO_OPTIONS,
  http: { type: 'string' },
  config: { type: 'string' },
  header: { type: 'string', multiple: true },
  name: { type: 'string' },
  'upstream-pool': { type: 'string' },
  'call-timeout-ms': { type: 'string' },
  'connect-timeout-ms': { type: 'string' },
  'retry-safe': { type: 'string', multiple: true },
  'serve-stdio': { type: 'boolean' },
  'upstream-oauth-client-id': { type: 'string' },
  'upstream-oauth-issuer': { type: 'string' },
  'upstream-oauth-scope': { type: 'string' },
  'log-upstream-commands': { type: 'boolean' },
} as const;

const INTERPRETERS = new Set(['node', 'python', 'python3', 'npx', 'uvx', 'uv', 'deno', 'bun', 'docker', 'sh', 'bash']);
const EVAL_FLAGS = new Set(['-e', '--eval', '-p', '--print', '-c']);

function defaultName(command: string, args: string[]): string {
  const cmd = basename(command);
  if (!INTERPRETERS.has(cmd)) return cmd;
  // `node -e CODE`, `sh -c CODE`: the code is no name (and may hold a secret).
  if (args.some((a) => EVAL_FLAGS.has(a))) return cmd;
  const script = args.find((a) => !a.startsWith('-'));
  if (!script) return cmd;
  // node …/server-everything/dist/index.js → server-everything: the package, not its entry file.
  const parts = script.split(/[\\/]/).filter(Boolean);
  let i = parts.length - 1;
  if (/^(index|main|server|cli)$/.test(basename(parts[i]!, extname(parts[i]!)))) {
    for (i--; i >= 0 && /^(dist|build|lib|src|bin|out)$/.test(parts[i]!); i--);
    if (i >= 0) return parts[i]!;
  }
  return basename(script, extname(script));
}

export async function gatewayCommand(values: FrontValues, failed: (message: string) => never): Promise<void> {
  // The upstream's flags are usage mistakes, said as the parser says its own: one line, pointing to the help.
  const fail: (m: string) => never = (m) => failed(`outlast gateway: ${m}; run outlast help`);
  const { stdio, env, cwd, http, header, name, config, ...front } = values;
  const usage = <T>(read: () => T): T => {
    try {
      return read();
    } catch (e) {
      if (e instanceof UsageError) fail(e.message);
      throw e;
    }
  };
  if ([stdio, http, config].filter((u) => u !== undefined).length !== 1) fail('one upstream is needed: --stdio "CMD ARGS…" or --http URL (or --config FILE for several)');
  let upstreams: UpstreamSpec[];
  /** Warnings for secrets given literally on the command line, logged once the log exists. */
  const commandLineSecrets: string[] = [];
  if (typeof config === 'string') {
    if (env?.length || cwd || header?.length || name || values['upstream-oauth-client-id']) fail('--env, --cwd, --header, --name and --upstream-oauth-* are for --stdio or --http; with --config they go in the file');
    upstreams = usage(() => readGatewayConfig(config));
  } else if (typeof stdio === 'string') {
    if (header?.length || values['upstream-oauth-client-id']) fail('--header and --upstream-oauth-* are for an --http upstream');
    // The same reading of "CMD ARGS" and --env as `outlast call --stdio` (stdio-options.ts), said in this command's words.
    const words = usage(() => splitCommandLine(stdio));
    const vars = usage(() => expandedFlagValues(envFlags(env as string[] | undefined) ?? {}, '--env'));
    const secrets = vars.secrets.length ? { secrets: vars.secrets } : {};
    upstreams = [{ kind: 'stdio', name: name ?? defaultName(words[0]!, words.slice(1)), command: words[0]!, args: words.slice(1), env: vars.values, ...(cwd ? { cwd } : {}), ...secrets }];
  } else {
    if (env?.length || cwd) fail('--env and --cwd are for a --stdio upstream');
    const url = usage(() => httpUrlOf(http!, '--http'));
    const given: Record<string, string> = {};
    for (const h of (header as string[] | undefined) ?? []) {
      const i = h.indexOf(':');
      if (i <= 0) fail(`--header must be "K: V", got "${h.slice(0, Math.max(0, i)) || 'a value without a name'}"`);
      const key = h.slice(0, i).trim();
      given[key] = h.slice(i + 1).trim();
      // A header usually carries the upstream's credentials: given literally, every local user reads it in ps.
      if (!given[key]!.includes('${')) commandLineSecrets.push(`--header "${key}: …" puts its value in this process's command line, which other local users can read (ps, /proc/PID/cmdline): write it as '${key}: \${VAR}' (single-quoted, so the gateway reads $VAR from its environment) or in a --config file`);
    }
    const expandedHeaders = usage(() => expandedFlagValues(given, '--header'));
    const headers = expandedHeaders.values;
    const clientId = values['upstream-oauth-client-id'] as string | undefined;
    const issuer = values['upstream-oauth-issuer'] as string | undefined;
    const scope = values['upstream-oauth-scope'] as string | undefined;
    const secret = process.env.OUTLAST_UPSTREAM_OAUTH_CLIENT_SECRET;
    if (!clientId && (issuer || scope)) fail('--upstream-oauth-issuer and --upstream-oauth-scope go with --upstream-oauth-client-id');
    if (clientId && !issuer) fail('--upstream-oauth-client-id needs --upstream-oauth-issuer URL (the authorization server the credentials belong to)');
    if (clientId && !secret) fail('--upstream-oauth-client-id needs the client secret in $OUTLAST_UPSTREAM_OAUTH_CLIENT_SECRET');
    upstreams = [{ kind: 'http', name: name ?? new URL(url).host, url, headers, ...(clientId ? { oauth: { clientId, clientSecret: secret!, issuer: issuer!, ...(scope ? { scope } : {}) } } : {}), ...(expandedHeaders.secrets.length ? { secrets: expandedHeaders.secrets } : {}) }];
  }
  const poolSize = intFlagOf(values, 'upstream-pool', fail, 1);
  const callTimeoutMs = intFlagOf(values, 'call-timeout-ms', fail, 1);
  const connectTimeoutMs = intFlagOf(values, 'connect-timeout-ms', fail, 1);
  const retrySafeTools = (values['retry-safe'] as string[] | undefined) ?? [];
  if (upstreams.length > 1) {
    for (const t of retrySafeTools) {
      if (!upstreams.some((u) => t.startsWith(`${u.name}__`))) fail(`--retry-safe "${t}" is no upstream's tool: with several upstreams a tool is NAME__TOOL (${upstreams.map((u) => `${u.name}__…`).join(', ')})`);
    }
  }
  const logCommands = values['log-upstream-commands'] === true;
  for (const k of ['upstream-pool', 'call-timeout-ms', 'connect-timeout-ms', 'retry-safe', 'serve-stdio', 'upstream-oauth-client-id', 'upstream-oauth-issuer', 'upstream-oauth-scope', 'log-upstream-commands']) delete front[k];
  // The front's --stdio (serve on stdin/stdout) is --serve-stdio here: --stdio names the upstream.
  if (values['serve-stdio']) front.stdio = true;
  await runFront(front, async ({ store, handles, log, ...options }) => {
    // The operator asked to read them: once, in the log only (nothing a caller receives quotes them).
    for (const w of commandLineSecrets) log.warn(w);
    if (logCommands) for (const u of upstreams) log.info(`upstream "${u.name}" is ${u.kind === 'stdio' ? `the command ${commandLine(u.command, u.args)}` : `at ${u.url}`} (--log-upstream-commands)`);
    // Handles are on unless --no-handles: most hosts a gateway serves have no Tasks.
    const outlast = new Outlast({ ...options, log, store: store as never, ...(handles === false ? {} : { handles: handles === undefined || handles === true ? true : handles }) });
    const gateway = await mountGateway(outlast, {
      upstreams,
      log,
      ...(poolSize !== undefined ? { poolSize } : {}),
      ...(callTimeoutMs !== undefined ? { callTimeoutMs } : {}),
      ...(connectTimeoutMs !== undefined ? { connectTimeoutMs } : {}),
      retrySafeTools,
    });
    return { outlast, factory: gateway.factory, info: gateway.info, describe: `${upstreams.length > 1 ? 'upstreams' : 'upstream'} ${upstreams.map((u) => `"${u.name}"`).join(', ')}`, close: () => gateway.close() };
  }, failed);
}
