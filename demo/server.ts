/**
 * The demo server: three tools a user recognises.
 *   npm ci && npm start        → http://127.0.0.1:3000/mcp, tasks in .outlast/tasks.db (PORT overrides the port)
 *
 * - reindex:   duration grows with the collection; small ones answer inline, large ones become tasks with
 *              progress in statusMessage. Cancel-aware, and safe to re-run after a crash (it rebuilds from scratch).
 * - run_pipeline: a CI run (checkout, install, build, test, package), one statusMessage per stage. Cancel-aware;
 *              not safe to re-run (it publishes an artifact).
 * - migrate:   asks a human to approve a schema migration, with a deadline, before it touches anything.
 */
import { setTimeout as delay } from 'node:timers/promises';
import * as z from 'zod';
import { defineServer } from '../src/server/module.js';
import type { TaskContext } from '../src/runtime/context.js';

/** Waits `ms`, or throws as soon as the task is cancelled. */
const wait = (ms: number, signal: AbortSignal): Promise<void> => delay(ms, undefined, { signal });

const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });

async function stage(ctx: TaskContext, name: string, ms: number, log: string[]): Promise<void> {
  ctx.signal.throwIfAborted();
  await ctx.status(`${name}…`);
  await wait(ms, ctx.signal);
  log.push(`✓ ${name} (${(ms / 1000).toFixed(1)} s)`);
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
        }
        return text(`Reindexed ${documents.toLocaleString('en')} documents in "${collection}" (attempt ${ctx.attempt}).`);
      },
    );

    outlast.tool(
      'run_pipeline',
      {
        title: 'Run the CI pipeline',
        description: 'Checks out a ref and runs install, build, test and package. Takes about 15 s.',
        inputSchema: { repository: z.string().min(1), ref: z.string().default('main') },
        pollIntervalMs: 2000,
      },
      async ({ repository, ref }, ctx) => {
        const log: string[] = [];
        await stage(ctx, `checkout ${repository}@${ref}`, 1500, log);
        await stage(ctx, 'install dependencies', 3000, log);
        await stage(ctx, 'build', 4000, log);
        await stage(ctx, 'test', 5000, log);
        await stage(ctx, 'package', 1500, log);
        return text(`Pipeline for ${repository}@${ref} passed:\n${log.join('\n')}`);
      },
    );

    outlast.tool(
      'migrate',
      {
        title: 'Apply a database migration (needs approval)',
        description: 'Asks a human to approve the migration (within approvalTimeoutSeconds), then applies it step by step.',
        inputSchema: {
          database: z.string().min(1),
          migration: z.string().min(1),
          approvalTimeoutSeconds: z.number().int().min(5).max(86_400).default(600),
        },
        policy: 'always',
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
        const steps = ['take a snapshot', 'add column orders.region', 'backfill orders.region', 'add index', 'verify'];
        for (const [i, step] of steps.entries()) {
          ctx.signal.throwIfAborted();
          await ctx.status(`step ${i + 1}/${steps.length}: ${step}`);
          await wait(1000, ctx.signal);
        }
        return text(`Applied ${migration} to ${database} (approved${answer.content?.reason ? `: ${String(answer.content.reason)}` : ''}).`);
      },
    );
  },
});
