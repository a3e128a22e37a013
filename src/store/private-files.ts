/**
 * Files that hold secrets, made for their user alone: the task store (its shared keys seal answer links and MRTR
 * state), the client's journal (arguments and results) and token files. A folder Outlast creates is 0700, a file
 * 0600; a folder or file that already exists is left as it is, and one that other users can read or write is named in
 * a process warning (code OUTLAST_FILE_MODE), once per path, since changing an existing mode may break a setup that
 * shares it on purpose.
 */
import { closeSync, mkdirSync, openSync, statSync } from 'node:fs';

/** Group and others may read or write: the bits a warning is about. */
const SHARED_BITS = 0o066;
const warned = new Set<string>();

const emit = (message: string) => process.emitWarning(message, { code: 'OUTLAST_FILE_MODE' });

/** Warns (once per path) when `path` exists and other users may read or write it; `fix` says what to run. */
export function warnIfShared(path: string, what: string, fix: string, warn: (message: string) => void = emit): void {
  if (process.platform === 'win32' || warned.has(path)) return;
  let mode: number;
  try {
    mode = statSync(path).mode & 0o777;
  } catch {
    return; // gone meanwhile, or not ours to look at: opening it reports what is wrong
  }
  if ((mode & SHARED_BITS) === 0) return;
  warned.add(path);
  warn(`${what} ${path} can be read or written by other users (mode ${mode.toString(8)}): ${fix}`);
}

/** Creates `path` and its missing parents 0700; an existing folder is kept as it is, with a warning if it is shared. */
export function makePrivateFolder(path: string, what: string): void {
  let exists = false;
  try {
    exists = statSync(path).isDirectory();
  } catch {
    exists = false;
  }
  if (exists) warnIfShared(path, what, `the files Outlast makes in it are 0600, but others see their names; run chmod 700 ${path}`);
  else mkdirSync(path, { recursive: true, mode: 0o700 });
}

/** Creates `path` empty and 0600 unless it exists; an existing file is kept as it is, with a warning if it is shared. */
export function createPrivateFile(path: string, what: string, alsoFix = ''): void {
  try {
    closeSync(openSync(path, 'wx', 0o600));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    warnIfShared(path, what, `run chmod 600 ${path}${alsoFix}`);
  }
}
