/**
 * Which line of a failed process's stderr says why it failed: a stack trace or a runtime's farewell comes after the
 * cause (Node prints `Error: Cannot find module '…'`, then the stack, `code: 'MODULE_NOT_FOUND'` and `Node.js v20`;
 * Python's traceback ends with `ModuleNotFoundError: …`), so neither the first nor the last line will do. The line
 * chosen is the last of the strongest kind seen: an error's own line, else a line that mentions an error, else the
 * last line.
 */

/** An error's own line, at the start of a line: `Error: …`, `TypeError [ERR_X]: …`, `ModuleNotFoundError: …`,
 *  `java.lang.IllegalStateException: …`, `error[E0432]: …`, `panic: …`, `fatal: …`, `ERROR:root:…`,
 *  `Exception in thread "main" …`, `thread 'main' panicked at …`. */
const ERROR_LINE = [
  /^(?:Uncaught )?(?:[A-Za-z_$][\w$.]*)?(?:Error|Exception)(?: \[[\w-]+\])?: \S/,
  /^(?:error|fatal|panic|critical)(?:\[[\w-]+\])?:/i,
  /^Exception in thread /,
  /^thread '[^']*' panicked at /,
];
/** A line that mentions an error: a log level, or the words of a common failure. */
const MENTIONS_ERROR = [
  /\b(?:ERROR|FATAL|CRITICAL)\b/,
  /\blevel=(?:error|fatal)\b/i,
  /Cannot find module|No module named|not found|No such file or directory|Permission denied|\bE[A-Z]{3,}\b/,
];

/** 2: an error's own line; 1: a line that mentions an error; 0: any other non-empty line. */
export function causeWeight(line: string): 0 | 1 | 2 {
  if (ERROR_LINE.some((r) => r.test(line))) return 2;
  if (MENTIONS_ERROR.some((r) => r.test(line))) return 1;
  return 0;
}

/** Follows a stderr stream line by line and keeps the one line that best says why the process failed. */
export class StderrCause {
  private best: string | undefined;
  private weight = -1;

  see(line: string): void {
    if (!line.trim()) return;
    const w = causeWeight(line);
    if (w < this.weight) return;
    this.best = line.trim();
    this.weight = w;
  }

  /** The line, or undefined when nothing was written. */
  get line(): string | undefined {
    return this.best;
  }
}
