#!/usr/bin/env node
// `npm test` and `npm run test:quick`: runs the compiled test files (dist/test/*.test.js) side by side, each file in
// a node process of its own, and prints each file's whole output when it ends, so a log reads file by file.
//
//   node scripts/test.mjs [--quick] [--jobs N] [FILE-OR-NAME...]
//
// Files start slowest first (each file's last local time, else scripts/test-times.json), JOBS at a time (default:
// three per core, at least 2: most of a file's time is spent waiting on its servers), at most three of those marked
// `// test:pg-replicas` at once; files in SERIAL, if any, then run alone, after the rest. --quick runs only the files
// marked `// test:quick` (no child process, no browser), with child processes refused (scripts/no-child-process.mjs).
// Exit code 1 when any test failed or any file ended without its summary (a crash, a timeout); nothing is retried.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const testDir = join(root, 'dist', 'test');
const timesFile = join(root, 'dist', '.test-times.json');

// Files that must run alone, and why (file name → reason), for a test that measures the machine itself. None does
// now: fairness counts slots rather than timing them, and store-failover's 6 s lease leaves room for the others' load.
const SERIAL = {};
// Slowest first when no local timing exists (a clean clone): each file's seconds in a whole run of this script on
// the 2-core CI machine (scripts/test-times.json). A file in neither starts first: it may be long.
const MEASURED = JSON.parse(readFileSync(join(root, 'scripts', 'test-times.json'), 'utf8'));
const PER_FILE_TIMEOUT_MS = 15 * 60_000;

const args = process.argv.slice(2);
const quick = args.includes('--quick');
const jobsAt = args.indexOf('--jobs');
const jobs = Number(jobsAt >= 0 ? args[jobsAt + 1] : process.env.OUTLAST_TEST_JOBS ?? Math.max(2, availableParallelism() * 3));
if (!Number.isInteger(jobs) || jobs < 1) fail(`--jobs takes a whole number of at least 1 (got ${JSON.stringify(args[jobsAt + 1] ?? process.env.OUTLAST_TEST_JOBS)})`);
const named = args.filter((a, i) => !a.startsWith('--') && args[i - 1] !== '--jobs');

function fail(message) {
  console.error(`scripts/test.mjs: ${message}`);
  process.exit(2);
}

if (!existsSync(testDir)) fail('dist/test is missing: build first (npx tsc -p tsconfig.json)');
let files = readdirSync(testDir).filter((f) => f.endsWith('.test.js')).sort();
if (named.length > 0) {
  const wanted = named.map((n) => basename(n).replace(/\.ts$/, '.js').replace(/(\.test)?(\.js)?$/, '.test.js'));
  const unknown = wanted.filter((w) => !files.includes(w));
  if (unknown.length > 0) fail(`no such test file: ${unknown.join(', ')}`);
  files = wanted;
}
if (quick) {
  // The marker is read from the source, so a file is quick because it says so where it is edited.
  files = files.filter((f) => {
    const source = join(root, 'test', f.replace(/\.js$/, '.ts'));
    return existsSync(source) && /^\/\/ test:quick\b/m.test(readFileSync(source, 'utf8'));
  });
  if (files.length === 0) fail('no test file is marked `// test:quick`');
}

const times = existsSync(timesFile) ? JSON.parse(readFileSync(timesFile, 'utf8')) : {};
const guess = (f) => times[f] ?? (f in MEASURED ? MEASURED[f] * 1000 : Infinity);

// Files that start PostgreSQL replicas (marked `// test:pg-replicas` in their source) run at most this many at once:
// a replica may hold about 20 connections (its pool of 10, control and heartbeat pools of 4, the bus's two), and
// PostgreSQL's default max_connections is 100 (a CI run with five such files at once was refused "too many clients").
const PG_REPLICA_FILES_AT_ONCE = 3;
const pgReplicaFiles = new Set(files.filter((f) => {
  const source = join(root, 'test', f.replace(/\.js$/, '.ts'));
  return existsSync(source) && /^\/\/ test:pg-replicas\b/m.test(readFileSync(source, 'utf8'));
}));
const parallel = files.filter((f) => quick || !(f in SERIAL)).sort((a, b) => guess(b) - guess(a));
const serial = files.filter((f) => !parallel.includes(f));

const running = new Map();
const results = [];
let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    stopping = true;
    console.error(`\nscripts/test.mjs: ${signal}: stopping ${running.size} running file(s) and their servers`);
    for (const child of running.values()) killGroup(child, 'SIGTERM');
    setTimeout(() => {
      for (const child of running.values()) killGroup(child, 'SIGKILL');
      process.exit(130);
    }, 5000).unref();
  });
}

/** Each file runs in a process group of its own, so a timeout or a stop also ends the servers it started. */
function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
}

function runFile(file) {
  return new Promise((done) => {
    const started = Date.now();
    // Run directly (no `--test` runner in between): one process per file, its spec report on stdout.
    const nodeArgs = ['--test-reporter=spec'];
    if (quick) nodeArgs.push('--import', join(root, 'scripts', 'no-child-process.mjs'));
    const child = spawn(process.execPath, [...nodeArgs, join(testDir, file)], {
      cwd: root,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, FORCE_COLOR: '0' },
    });
    running.set(file, child);
    const chunks = [];
    child.stdout.on('data', (c) => chunks.push(c));
    child.stderr.on('data', (c) => chunks.push(c));
    const timer = setTimeout(() => {
      chunks.push(Buffer.from(`\nscripts/test.mjs: ${file} ran past ${PER_FILE_TIMEOUT_MS / 60_000} minutes; stopped\n`));
      killGroup(child, 'SIGKILL');
    }, PER_FILE_TIMEOUT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      running.delete(file);
      // A file's servers are stopped by its own hooks; whatever is left in its group goes with it.
      killGroup(child, 'SIGKILL');
      const output = Buffer.concat(chunks).toString('utf8');
      const count = (name) => Number(output.match(new RegExp(`^ℹ ${name} (\\d+)$`, 'm'))?.[1] ?? NaN);
      const result = { file, code, signal, ms: Date.now() - started, tests: count('tests'), pass: count('pass'), fail: count('fail'), cancelled: count('cancelled'), skipped: count('skipped'), todo: count('todo'), output };
      result.ok = code === 0 && result.fail === 0 && result.cancelled === 0 && !Number.isNaN(result.tests);
      results.push(result);
      process.stdout.write(`\n━━ ${file} (${(result.ms / 1000).toFixed(1)} s, ${result.ok ? 'ok' : 'FAILED'}) ━━\n${output}`);
      done(result);
    });
  });
}

async function pool(list, width) {
  const queue = [...list];
  let pgReplicaRunning = 0;
  const waiting = [];
  // The first file in order that may start now (a file of PostgreSQL replicas only below its limit).
  const nextIndex = () => queue.findIndex((f) => !pgReplicaFiles.has(f) || pgReplicaRunning < PG_REPLICA_FILES_AT_ONCE);
  const workers = Array.from({ length: Math.min(width, queue.length) }, async () => {
    while (queue.length > 0 && !stopping) {
      const i = nextIndex();
      if (i < 0) {
        // Only files of replicas are left and their limit is reached: wait for one of them to end.
        await new Promise((wake) => waiting.push(wake));
        continue;
      }
      const [file] = queue.splice(i, 1);
      const replicas = pgReplicaFiles.has(file);
      if (replicas) pgReplicaRunning++;
      try {
        await runFile(file);
      } finally {
        if (replicas) {
          pgReplicaRunning--;
          for (const wake of waiting.splice(0)) wake();
        }
      }
    }
  });
  await Promise.all(workers);
}

const began = Date.now();
console.log(`scripts/test.mjs: ${parallel.length} file(s) ${jobs} at a time${serial.length ? `, then ${serial.length} alone (${serial.join(', ')})` : ''}${quick ? ', quick' : ''}`);
await pool(parallel, jobs);
await pool(serial, 1);
if (stopping) process.exit(130);

if (named.length === 0 && !quick) {
  mkdirSync(dirname(timesFile), { recursive: true });
  writeFileSync(timesFile, JSON.stringify({ ...times, ...Object.fromEntries(results.map((r) => [r.file, r.ms])) }, null, 1));
}
const sum = (k) => results.reduce((s, r) => s + (Number.isNaN(r[k]) ? 0 : r[k]), 0);
const failed = results.filter((r) => !r.ok);
console.log(`\n━━ summary ━━`);
console.log(`files ${results.length}, tests ${sum('tests')}, pass ${sum('pass')}, fail ${sum('fail')}, cancelled ${sum('cancelled')}, skipped ${sum('skipped')}, todo ${sum('todo')}`);
console.log(`wall ${((Date.now() - began) / 1000).toFixed(0)} s with ${jobs} at a time; slowest: ${[...results].sort((a, b) => b.ms - a.ms).slice(0, 6).map((r) => `${r.file} ${(r.ms / 1000).toFixed(0)} s`).join(', ')}`);
for (const r of failed) {
  const why = r.output.match(/✖ failing tests:[\s\S]*$/)?.[0] ?? r.output.split('\n').slice(-30).join('\n');
  console.log(`\n✖ ${r.file} (exit ${r.code ?? r.signal})\n${why}`);
}
process.exit(failed.length > 0 ? 1 : 0);
