/**
 * An upstream's secrets stay in the gateway's process. What it says of an upstream, to callers (errors of tools/list and
 * tools/call, its server description) and in its log, names the upstream by its name and its program's base name, or
 * its URL without userinfo, query and fragment; and every text about it (an error, a line of its stderr) has the values
 * it was given as secrets replaced by `[redacted]`: its `env` and `headers` values, what each `${VAR}` of the config
 * became, its URL's userinfo and query values, its OAuth client secret, and the value of an argument whose flag names a
 * secret (`--api-key=…`, `--token …`). The full command line reaches the log only with --log-upstream-commands.
 */
import { basename } from 'node:path';
import type { JsonObject } from '../protocol/index.js';
import type { Logger } from '../runtime/types.js';
import type { UpstreamSpec } from './spec.js';

export const REDACTED = '[redacted]';
/** Shorter values are left in texts: too short to be a credential, and replacing them (`warn`, `true`, `3000`) would
 *  garble the message. */
const MIN_SECRET_CHARS = 6;
/** A flag, variable or parameter name that says its value is a secret. */
const SECRET_NAME = /key|token|secret|passw(?:or)?d|pwd|auth|credential|cookie|session|bearer|private/i;
/** A URL written in a text (an SDK or fetch error quotes it). */
const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]*:\/\/[^\s"'<>`()[\]{}]+/gi;

/** A URL as it may be shown: without userinfo, query and fragment. */
export function publicUrl(text: string): string {
  try {
    const u = new URL(text);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return text.replace(/\/\/[^/@\s]*@/, '//').replace(/[?#].*$/, '');
  }
}

/** How messages name an upstream: `upstream "NAME" (node)`, `upstream "NAME" (https://host/mcp)`. */
export function upstreamLabel(spec: UpstreamSpec): string {
  return `upstream "${spec.name}" (${spec.kind === 'stdio' ? basename(spec.command) : publicUrl(spec.url)})`;
}

/** The values of `args` that follow a flag naming a secret: `--api-key=VALUE`, `--token VALUE`. */
function secretArguments(args: readonly string[]): string[] {
  const out: string[] = [];
  args.forEach((a, i) => {
    const inline = /^--?([\w.-]+)=([\s\S]+)$/.exec(a);
    if (inline) {
      if (SECRET_NAME.test(inline[1]!)) out.push(inline[2]!);
      return;
    }
    const next = args[i + 1];
    if (/^--?[\w.-]+$/.test(a) && SECRET_NAME.test(a) && next !== undefined && !next.startsWith('-')) out.push(next);
  });
  return out;
}

/** Every value of `spec` that is a secret, longest first (so a secret that holds another is replaced whole). */
export function secretValues(spec: UpstreamSpec): string[] {
  const values = [...(spec.secrets ?? [])];
  if (spec.kind === 'stdio') {
    values.push(...Object.values(spec.env ?? {}), ...secretArguments(spec.args));
  } else {
    for (const v of Object.values(spec.headers ?? {})) values.push(v, v.replace(/^\S+\s+/, '')); // "Bearer T": T too
    if (spec.oauth) values.push(spec.oauth.clientSecret);
    try {
      const u = new URL(spec.url);
      values.push(u.username, u.password, u.hash.slice(1), ...[...u.searchParams.values()]);
      values.push(...u.search.slice(1).split('&').map((p) => p.slice(p.indexOf('=') + 1)));
    } catch {
      /* an invalid URL was refused before this */
    }
  }
  const all = values.flatMap((v) => [v, safeDecode(v), encodeURIComponent(v)]).filter((v) => v.length >= MIN_SECRET_CHARS);
  return [...new Set(all)].sort((a, b) => b.length - a.length);
}

function safeDecode(v: string): string {
  try {
    return decodeURIComponent(v);
  } catch {
    return v;
  }
}

/** What replaces the secrets of one upstream in a text: its secret values, every URL's userinfo, query and fragment,
 *  `Bearer …`/`Basic …` credentials and `NAME=VALUE` pairs whose name says secret. */
export type Redact = (text: string) => string;

const redactors = new WeakMap<UpstreamSpec, Redact>();

export function redactorOf(spec: UpstreamSpec): Redact {
  let redact = redactors.get(spec);
  if (!redact) {
    const values = secretValues(spec);
    redact = (text) => {
      let out = text;
      for (const v of values) out = out.split(v).join(REDACTED);
      return out
        .replace(URL_IN_TEXT, (u) => publicUrl(u))
        .replace(/\b(Bearer|Basic)\s+(?=[A-Za-z._~+/=-]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{8,}/g, `$1 ${REDACTED}`) // a credential has a digit or a sign: "Basic authentication" stays
        .replace(/\b([\w-]+)=([^\s"'&,;)]+)/g, (pair, name: string) => (SECRET_NAME.test(name) ? `${name}=${REDACTED}` : pair));
    };
    redactors.set(spec, redact);
  }
  return redact;
}

/** A secret in the URL's userinfo cannot travel in it (fetch refuses such a URL): it is sent as `Authorization: Basic`,
 *  as curl does, unless a header gives Authorization already; the URL keeps its secrets list for redaction. */
export function withUserinfoAsHeader(spec: UpstreamSpec): UpstreamSpec {
  if (spec.kind !== 'http') return spec;
  let url: URL;
  try {
    url = new URL(spec.url);
  } catch {
    return spec;
  }
  if (!url.username && !url.password) return spec;
  const user = safeDecode(url.username);
  const password = safeDecode(url.password);
  url.username = url.password = '';
  const headers = { ...(spec.headers ?? {}) };
  if (!Object.keys(headers).some((k) => k.toLowerCase() === 'authorization')) headers.Authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  return { ...spec, url: url.href, headers, secrets: [...(spec.secrets ?? []), user, password] };
}

/** A logger whose messages and string fields are redacted. */
export function redactingLogger(log: Logger, redact: Redact): Logger {
  const fields = (x?: JsonObject) => (x ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, typeof v === 'string' ? redact(v) : v])) : undefined);
  const at = (level: keyof Logger) => (msg: string, x?: JsonObject) => log[level](redact(msg), fields(x));
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}
