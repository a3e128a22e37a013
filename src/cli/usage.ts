/**
 * Command-line usage for every `outlast` command: the arguments are parsed with node:util's parseArgs, and a usage
 * mistake (an unknown flag, a flag without its value, a stray argument) becomes one line that names it and points to
 * `outlast help` (exit code 2), never a stack trace. `--help` / `-h` on a command prints that command's usage (exit 0).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';

/** A usage mistake: the CLI prints `outlast: MESSAGE` and exits 2. */
export class UsageError extends Error {}

/** The command asked for its usage (`--help` / `-h`): print it and exit 0. */
export class HelpRequested extends Error {}

type Options = NonNullable<ParseArgsConfig['options']>;
/** What parseArgs returns for a command's options (positionals allowed, strict). */
export type ParsedCommand<O extends Options> = ReturnType<typeof parseArgs<{ args: string[]; options: O; allowPositionals: true; strict: true }>>;

/** Whether argv asks for help: `--help` or `-h` before any `--`. */
export function asksForHelp(argv: string[]): boolean {
  for (const a of argv) {
    if (a === '--') return false;
    if (a === '--help' || a === '-h') return true;
  }
  return false;
}

/** parseArgs' error as one line a user can act on. */
function usageLine(command: string, e: unknown, options: Options): string {
  const code = (e as { code?: string }).code;
  const message = (e as Error).message ?? String(e);
  const quoted = /'(-[^' ]*)/.exec(message)?.[1];
  const flag = quoted?.replace(/=.*$/, '');
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    return `outlast ${command}: unknown option ${flag ?? message}; run outlast help for the options of ${command}`;
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const name = flag?.replace(/^--?/, '');
    const def = name ? options[name] : undefined;
    if (def?.type === 'boolean') return `outlast ${command}: ${flag} takes no value; run outlast help`;
    return `outlast ${command}: ${flag ?? 'an option'} needs a value; run outlast help`;
  }
  return `outlast ${command}: ${message}; run outlast help`;
}

/**
 * parseArgs for `outlast COMMAND`: throws HelpRequested for `--help`/`-h`, UsageError (one line) for a usage mistake,
 * and, when `maxPositionals` is given, for more positional arguments than the command takes.
 */
export function parseCommand<O extends Options>(command: string, argv: string[], options: O, maxPositionals?: number): ParsedCommand<O> {
  if (asksForHelp(argv)) throw new HelpRequested(command);
  let parsed: ParsedCommand<O>;
  try {
    // Positionals are always parsed, so one too many is named (below) rather than refused by parseArgs' own words.
    parsed = parseArgs({ args: argv, allowPositionals: true as const, strict: true as const, options });
  } catch (e) {
    throw new UsageError(usageLine(command, e, options));
  }
  if (maxPositionals !== undefined && parsed.positionals.length > maxPositionals) {
    throw new UsageError(`outlast ${command}: unexpected argument "${parsed.positionals[maxPositionals]}"; run outlast help`);
  }
  return parsed;
}
