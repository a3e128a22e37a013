/**
 * Where the server commands' secrets come from: a flag (readable by every local user in `ps` and /proc/PID/cmdline,
 * so it is warned about at start), a file (`--bearer-file`, `--operator-file`, `--operator-readonly-file`: one
 * `TOKEN=NAME` a line, `#` comments and blank lines allowed; a file others can read is warned about) or the
 * environment (`OUTLAST_BEARER_TOKENS`, `OUTLAST_OPERATOR`, `OUTLAST_OPERATOR_READONLY`: the same entries, separated by
 * newlines or commas; `OUTLAST_ALERT_WEBHOOK_SECRET`, `OUTLAST_PUSH_SECRET`). Every source is merged into the flag's
 * own value, so the flags' checks apply to all of them; a token is never quoted in an error.
 */
import { readFileSync } from 'node:fs';
import { warnIfShared } from '../store/private-files.js';

/** A list of TOKEN=NAME pairs and its file and environment forms. */
interface PairSecret {
  flag: 'bearer' | 'operator' | 'operator-readonly';
  file: `${string}-file`;
  env: string;
  what: string;
}

const PAIR_SECRETS: readonly PairSecret[] = [
  { flag: 'bearer', file: 'bearer-file', env: 'OUTLAST_BEARER_TOKENS', what: 'TOKEN=PRINCIPAL' },
  { flag: 'operator', file: 'operator-file', env: 'OUTLAST_OPERATOR', what: 'TOKEN=NAME' },
  { flag: 'operator-readonly', file: 'operator-readonly-file', env: 'OUTLAST_OPERATOR_READONLY', what: 'TOKEN=NAME' },
];

/** A single secret, its environment form, and the flag it serves (read from the environment only with that flag). */
const VALUE_SECRETS = [
  { flag: 'alert-webhook-secret', env: 'OUTLAST_ALERT_WEBHOOK_SECRET', for: 'alert-webhook' },
  { flag: 'push-secret', env: 'OUTLAST_PUSH_SECRET', for: 'push-destination' },
] as const;

/** The file flags, for a command's parseArgs options. */
export const SECRET_FILE_OPTIONS = {
  'bearer-file': { type: 'string' },
  'operator-file': { type: 'string' },
  'operator-readonly-file': { type: 'string' },
} as const;

export const SECRET_HELP = `Secrets (a flag's value is readable by every local user in ps and /proc/PID/cmdline: prefer these):
  --bearer-file PATH       static bearer tokens, one TOKEN=PRINCIPAL a line (# comments, blank lines allowed);
                           or $OUTLAST_BEARER_TOKENS (entries separated by newlines or commas)
  --operator-file PATH     operators who may act, one TOKEN=NAME a line; or $OUTLAST_OPERATOR
  --operator-readonly-file PATH   operators who may only look; or $OUTLAST_OPERATOR_READONLY
  $OUTLAST_ALERT_WEBHOOK_SECRET   the alert webhooks' whsec_… secret (instead of --alert-webhook-secret)
  $OUTLAST_PUSH_SECRET     the push destinations' whsec_… secret (instead of --push-secret)
`;

export interface ResolvedSecrets {
  /** The values with every source merged into the flags' own (lists appended, single values filled in). */
  values: Record<string, unknown>;
  /** One line per secret given on the command line, and per file others may read, for the log. */
  warnings: string[];
  /** Where each kind of secret came from, for one info line at start (counts only, never a value). */
  sources: string[];
}

/** The entries of a token file or variable: lines (and, for a variable, commas), without comments and blank lines. */
function entriesOf(text: string, splitCommas: boolean): Array<{ line: number; entry: string }> {
  const out: Array<{ line: number; entry: string }> = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    for (const part of splitCommas ? raw.split(',') : [raw]) {
      const entry = part.trim();
      if (entry && !entry.startsWith('#')) out.push({ line: i + 1, entry });
    }
  });
  return out;
}

/** Checks each entry is TOKEN=NAME; the error names the source and the line, never the entry (it holds a token). */
function checkedPairs(entries: Array<{ line: number; entry: string }>, where: string, what: string): string[] | string {
  for (const { line, entry } of entries) {
    const i = entry.indexOf('=');
    if (i <= 0 || i === entry.length - 1) return `${where}: line ${line} is not ${what} (the line is not shown: it may hold a token)`;
  }
  return entries.map((e) => e.entry);
}

/** Merges the file and environment forms of every secret a command takes (a flag among its `options`) into `values`;
 *  a string is the usage error to print. */
export function resolveSecrets(values: Record<string, unknown>, options: object, env: NodeJS.ProcessEnv = process.env): ResolvedSecrets | string {
  const out: Record<string, unknown> = { ...values };
  const warnings: string[] = [];
  const sources: string[] = [];
  for (const s of PAIR_SECRETS.filter((p) => p.flag in options)) {
    const fromFlag = (values[s.flag] as string[] | undefined) ?? [];
    if (fromFlag.length) warnings.push(`--${s.flag} puts secrets in this process's command line, which other local users can read (ps, /proc/PID/cmdline): use --${s.file} PATH or $${s.env} instead`);
    const merged = [...fromFlag];
    const counts: string[] = fromFlag.length ? [`${fromFlag.length} from --${s.flag}`] : [];
    const path = values[s.file] as string | undefined;
    if (path !== undefined) {
      let text: string;
      try {
        text = readFileSync(path, 'utf8');
      } catch (e) {
        return `--${s.file} ${path}: ${(e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (e as Error).message}`;
      }
      warnIfShared(path, `--${s.file}`, `run chmod 600 ${path}`, (m) => warnings.push(m));
      const pairs = checkedPairs(entriesOf(text, false), `--${s.file} ${path}`, s.what);
      if (typeof pairs === 'string') return pairs;
      if (pairs.length === 0) return `--${s.file} ${path} holds no ${s.what} line`;
      merged.push(...pairs);
      counts.push(`${pairs.length} from ${path}`);
    }
    const fromEnv = env[s.env];
    if (fromEnv !== undefined && fromEnv.trim() !== '') {
      const pairs = checkedPairs(entriesOf(fromEnv, true), `$${s.env}`, s.what);
      if (typeof pairs === 'string') return pairs;
      merged.push(...pairs);
      counts.push(`${pairs.length} from $${s.env}`);
    }
    const tokens = merged.map((p) => p.slice(0, p.indexOf('=')));
    if (new Set(tokens).size !== tokens.length) return `a --${s.flag} token is given twice (${counts.join(', ')}): give each token once`;
    if (merged.length) {
      out[s.flag] = merged;
      sources.push(`${s.flag} tokens: ${counts.join(', ')}`);
    }
  }
  for (const s of VALUE_SECRETS.filter((v) => v.flag in options)) {
    if (values[s.flag] !== undefined) {
      warnings.push(`--${s.flag} puts a secret in this process's command line, which other local users can read (ps, /proc/PID/cmdline): use $${s.env} instead`);
    } else if (env[s.env] && values[s.for] !== undefined) {
      out[s.flag] = env[s.env]!.trim();
      sources.push(`${s.flag}: from $${s.env}`);
    }
  }
  return { values: out, warnings, sources };
}
