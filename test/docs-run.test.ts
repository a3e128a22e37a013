/**
 * The blocks of docs/ that claim to run, run: each is read from its page (docBlock) and used as a reader would.
 * (README.md's install and quick start run in test/quickstart.test.ts.)
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BIN, FIXTURES, ROOT, callTool, sleep, tempDir, textOf } from './helpers.js';
import { docBlock } from './doc-blocks.js';

describe('docs/operations.md', () => {
  it('tracing.mjs, loaded first with --import, makes `outlast serve` record its server and handler spans', { timeout: 60_000 }, async () => {
    // Beside the build, so its import resolves the project's @opentelemetry/sdk-trace-node as an app's would.
    const file = join(ROOT, 'dist', 'test', 'doc-tracing.mjs');
    writeFileSync(file, docBlock('docs/operations.md', 'tracing').code);
    const db = join(tempDir(), 'tasks.db');
    const proc = spawn(process.execPath, ['--import', file, BIN, 'serve', FIXTURES, '--port', '0', '--store', `sqlite:${db}`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    try {
      let url: string | undefined;
      for (let i = 0; i < 300 && !url && proc.exitCode === null; i++, await sleep(100)) url = /outlast listening on ([^\s"]+)/.exec(out)?.[1];
      assert.ok(url, `the server did not start:\n${err}`);
      const r = await callTool(url, 'sleep', { seconds: 0 });
      assert.match(textOf(r.result), /slept/i);
      // The batch processor exports every 5 s: wait for the spans, not for a time.
      for (let i = 0; i < 300 && !(out.includes("name: 'tools/call sleep'") && out.includes("name: 'execute_tool sleep'")); i++) await sleep(100);
      assert.match(out, /name: 'tools\/call sleep'/, out);
      assert.match(out, /name: 'execute_tool sleep'/, out);
    } finally {
      proc.kill('SIGKILL');
    }
  });
});
