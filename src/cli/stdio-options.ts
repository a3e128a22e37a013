/**
 * The client commands' stdio flags: `--stdio "CMD ARGS"` names a server the CLI starts itself and speaks to over its
 * stdin/stdout, `--env K=V` (repeatable) sets variables for it, `--cwd DIR` its working directory.
 *
 * "CMD ARGS" is split into words as sh splits them (quotes and backslashes, by shell-quote), but no shell runs it:
 * `$VARS` stay as written, and pipes, redirections, `;`, `&&` and comments are refused (say `sh -c '…'` for those).
 */
import { resolve } from 'node:path';
import { parse } from 'shell-quote';
import { stdioTarget } from '../client/stdio-transport.js';
import { UsageError } from './usage.js';

export const STDIO_OPTIONS = {
  stdio: { type: 'string' },
  env: { type: 'string', multiple: true },
  cwd: { type: 'string' },
} as const;

export const STDIO_STRING_OPTIONS = ['--stdio', '--env', '--cwd'];

export const STDIO_HELP = `  --stdio "CMD ARGS"       (call) start the MCP server CMD and speak to it over its stdin/stdout, instead of a URL;
                           split like a shell splits words (quotes, backslashes), but no shell runs it
  --env K=V                (call, resume, cancel, logs) a variable for the stdio server, repeatable; it gets only
                           these and HOME, LOGNAME, PATH, SHELL, TERM, USER. Not journaled: give them again to resume
  --cwd DIR                (call) the stdio server's working directory (default: this one)
A stdio call is journaled with its command, arguments and working directory (not --env): \`outlast resume\` starts
the server again there, and it finds the task in its own store.`;

export interface StdioFlagValues {
  stdio?: string | undefined;
  env?: string[] | undefined;
  cwd?: string | undefined;
}

/** Where a quote opened and was never closed, if one was (shell-quote would silently close it). */
function unclosedQuote(line: string): string | undefined {
  let quote: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (quote) {
      if (c === quote) quote = undefined;
      else if (c === '\\' && quote === '"') i++;
    } else if (c === '\\') i++;
    else if (c === '"' || c === "'") quote = c;
  }
  return quote;
}

/** "CMD ARGS" as the words a shell would pass to CMD, or a UsageError that says what is wrong with it. */
export function splitCommandLine(line: string): string[] {
  const quote = unclosedQuote(line);
  if (quote) throw new UsageError(`--stdio: the ${quote === '"' ? 'double' : 'single'} quote in "${line}" is never closed`);
  const words: string[] = [];
  // A function for variables keeps "$X" as written: no shell, no expansion.
  for (const w of parse(line, (name) => `$${name}`)) {
    if (typeof w === 'string') words.push(w);
    else if ('op' in w && w.op === 'glob') words.push(w.pattern);
    else {
      const what = 'comment' in w ? `a comment (#${w.comment})` : `"${w.op}"`;
      throw new UsageError(`--stdio: ${what} needs a shell, and none runs the command; write --stdio "sh -c '…'" to use one`);
    }
  }
  if (!words.length) throw new UsageError('--stdio needs the command that starts the server, e.g. --stdio "node server.js"');
  return words;
}

/** `--env K=V …` as an environment (undefined when none was given). */
export function envFlags(list: string[] | undefined): Record<string, string> | undefined {
  if (!list?.length) return undefined;
  const env: Record<string, string> = {};
  for (const kv of list) {
    const eq = kv.indexOf('=');
    if (eq <= 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(kv.slice(0, eq))) throw new UsageError(`--env takes NAME=VALUE (a variable name, then "="); got "${kv}"`);
    env[kv.slice(0, eq)] = kv.slice(eq + 1);
  }
  return env;
}

/** The journal key of the server `--stdio` (and `--cwd`) name, or undefined without --stdio. */
export function stdioServerKey(values: StdioFlagValues): string | undefined {
  if (values.stdio === undefined) {
    if (values.cwd !== undefined) throw new UsageError('--cwd is the working directory of a --stdio server; give --stdio too');
    return undefined;
  }
  const [command, ...args] = splitCommandLine(values.stdio);
  return stdioTarget({ command: command!, args, cwd: resolve(values.cwd ?? '.') });
}
