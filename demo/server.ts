/**
 * The demo server: three tools a user recognises.
 *   npm ci && npm start        → http://127.0.0.1:3000/mcp, tasks in .outlast/tasks.db (PORT overrides the port)
 *
 * - reindex:   duration grows with the collection; small ones answer inline, large ones become tasks with
 *              progress in statusMessage and a partial result every 10,000 documents in the task's output
 *              (`dev.outlast.demo/indexed`). Cancel-aware, and safe to re-run after a crash (it rebuilds from scratch).
 * - run_pipeline: a CI run (checkout, install, build, test, package), one statusMessage per stage and each stage's log
 *              lines in the task's output (ctx.output), each stage a durable
 *              step: a server killed mid-pipeline resumes it at the stage it was in (finished stages are not run again;
 *              `package` publishes an artifact, so it is not re-run blindly: interrupted, the run fails naming it).
 * - migrate:   asks a human to approve a schema migration, with a deadline, before it touches anything; the wait is
 *              parked (no process holds it, a restart loses nothing), and each migration step is a durable step.
 */
import { setTimeout as delay } from 'node:timers/promises';
import * as z from 'zod';
import { defineServer } from '../src/server/module/module.js';
import type { TaskContext } from '../src/runtime/context.js';

/** Waits `ms`, or throws as soon as the task is cancelled. */
const wait = (ms: number, signal: AbortSignal): Promise<void> => delay(ms, undefined, { signal });

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

/** What each stage prints while it runs (the task's output, one line at a time). */
const STAGE_LOG: Record<string, string[]> = {
  checkout: ['Cloning into workspace…', 'HEAD is now at 3f9c2e1 Merge pull request #212'],
  install: ['resolving 412 packages', 'added 412 packages in 2.9s'],
  build: ['tsc -p tsconfig.json', 'compiled 188 files', 'bundle: dist/app.js 1.2 MB'],
  test: ['running 146 tests', 'suite api: 92 passed', 'suite ui: 54 passed', '146 passed, 0 failed'],
  package: ['packing acme-shop-1.4.0.tgz', 'published acme-shop-1.4.0.tgz'],
};

/** One pipeline stage as a durable step: runs once (the status says so), and a re-run returns what it recorded. Its log
 *  lines go to the task's output as it runs (a stage replayed after a crash does not print them twice). */
async function stage(ctx: TaskContext, name: string, label: string, ms: number, idempotent = true): Promise<string> {
  const ran = await ctx.step(name, async ({ signal }) => {
    await ctx.status(`${label}…`);
    await ctx.output(`[${name}] ${label}`);
    const lines = STAGE_LOG[name] ?? [];
    for (const line of lines) {
      await wait(ms / lines.length, signal);
      await ctx.output(`[${name}] ${line}`);
    }
    return { attempt: ctx.attempt };
  }, { idempotent });
  return `✓ ${label} (${(ms / 1000).toFixed(1)} s${ran.attempt > 1 ? ', after a restart' : ''})`;
}

export default defineServer({
  info: { name: 'outlast-demo', version: '0.1.0', title: 'Outlast demo: reindex, CI pipeline, approved migration' },
  // Clients without task support follow long calls through a handle and plain status/cancel tools.
  handles: true,
  setup(outlast) {
    outlast.tool(
      'reindex',
      {
        title: 'Reindex a collection',
        description: 'Rebuilds the search index of a collection. About 1 s per 10,000 documents: small collections answer at once, large ones run as a task.',
        inputSchema: { collection: z.string().min(1), documents: z.number().int().min(0).max(100_000_000) },
        retrySafe: true,
        pollIntervalMs: 1000,
      },
      async ({ collection, documents }, ctx) => {
        const batch = 2_000;
        let done = 0;
        while (done < documents) {
          ctx.signal.throwIfAborted();
          const n = Math.min(batch, documents - done);
          await wait(n / 10, ctx.signal); // 0.1 ms per document
          done += n;
          await ctx.status(`${collection}: ${done.toLocaleString('en')} of ${documents.toLocaleString('en')} documents indexed`);
          // The partial result, as a structured event a client can render (or import) while the rest runs.
          if (done % 10_000 === 0 || done === documents) await ctx.output({ type: 'dev.outlast.demo/indexed', data: { collection, indexed: done, of: documents } });
        }
        return text(`Reindexed ${documents.toLocaleString('en')} documents in "${collection}" (attempt ${ctx.attempt}).`);
      },
    );

    outlast.tool(
      'run_pipeline',
      {
        title: 'Run the CI pipeline',
        description: 'Checks out a ref and runs install, build, test and package. Takes about 15 s. Each stage is a durable step: after a crash it resumes at the stage it was in.',
        inputSchema: { repository: z.string().min(1), ref: z.string().default('main') },
        pollIntervalMs: 2000,
        durable: true,
      },
      async ({ repository, ref }, ctx) => {
        const log = [
          await stage(ctx, 'checkout', `checkout ${repository}@${ref}`, 1500),
          await stage(ctx, 'install', 'install dependencies', 3000),
          await stage(ctx, 'build', 'build', 4000),
          await stage(ctx, 'test', 'test', 5000),
          // Publishing is not repeated blindly: interrupted, the task fails naming the step, to be checked by hand.
          await stage(ctx, 'package', 'package', 1500, false),
        ];
        return text(`Pipeline for ${repository}@${ref} passed:\n${log.join('\n')}`);
      },
    );

    outlast.tool(
      'migrate',
      {
        title: 'Apply a database migration (needs approval)',
        description: 'Asks a human to approve the migration (within approvalTimeoutSeconds), then applies it step by step. The wait for approval holds no server process; each step is durable.',
        inputSchema: {
          database: z.string().min(1),
          migration: z.string().min(1),
          approvalTimeoutSeconds: z.number().int().min(5).max(86_400).default(600),
        },
        policy: 'always',
        durable: true,
      },
      async ({ database, migration, approvalTimeoutSeconds }, ctx) => {
        await ctx.status(`waiting for approval to run ${migration} on ${database}`);
        const answer = await ctx.elicit(
          `Apply migration "${migration}" to ${database}? It locks the orders table for about a minute.`,
          {
            type: 'object',
            properties: {
              approve: { type: 'boolean', title: 'Approve', description: 'Run the migration now' },
              reason: { type: 'string', title: 'Reason', description: 'Why (kept in the audit log)' },
            },
            required: ['approve'],
          },
          { key: 'approval', timeoutMs: approvalTimeoutSeconds * 1000 },
        );
        if (answer.action !== 'accept' || answer.content?.approve !== true) {
          return text(`Migration ${migration} was not approved (${answer.action}); nothing was changed.`);
        }
        // Each statement is safe to repeat (IF NOT EXISTS, a backfill that skips filled rows): idempotent steps.
        const steps = ['take a snapshot', 'add column orders.region', 'backfill orders.region', 'add index', 'verify'];
        for (const [i, step] of steps.entries()) {
          await ctx.step(step, async ({ signal }) => {
            await ctx.status(`step ${i + 1}/${steps.length}: ${step}`);
            await wait(1000, signal);
          }, { idempotent: true });
        }
        return text(`Applied ${migration} to ${database} (approved${answer.content?.reason ? `: ${String(answer.content.reason)}` : ''}).`);
      },
    );
  },
});
