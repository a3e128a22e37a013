/**
 * Apps written in a doc page, run as written: a marked block (read with test/doc-blocks.ts) is written into
 * dist/doc-run, where `outlast/server` resolves to this package, and started as its own process on a kernel-chosen port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

export const RUN_DIR = join(ROOT, 'dist', 'doc-run');

export interface App {
  url: string;
  proc: ChildProcess;
  stderr(): string;
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Writes a block's code (read with docBlock) into dist/doc-run as NAME.mjs; returns the file. */
export function writeScript(name: string, code: string): string {
  mkdirSync(RUN_DIR, { recursive: true });
  const file = join(RUN_DIR, `${name}.mjs`);
  writeFileSync(file, code);
  return file;
}

/** Starts `script` with PORT=0 and `env`, and waits for its `listening on URL` line (20 s). */
export async function startApp(script: string, env: Record<string, string>, label = script): Promise<App> {
  const proc = spawn(process.execPath, [script], { cwd: ROOT, env: { ...process.env, PORT: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  proc.stderr!.on('data', (d) => (err += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => proc.once('exit', (code, signal) => res({ code, signal })));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`${label} did not start in 20 s:\n${err}`)), 20_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`${label} exited (${code ?? signal}) before it listened:\n${err}`));
    });
  });
  return {
    url,
    proc,
    stderr: () => err,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) process.kill(proc.pid!, signal);
      return exited;
    },
  };
}
