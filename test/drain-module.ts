/**
 * A server module for the deploy tests (test/deploy.test.ts): one tool of each kind a replica may be running when it
 * is stopped. Every start, end and step of a handler is appended to $OUTLAST_RUN_LOG as one JSON line (tool, key,
 * event, step, pid, at), so a test can tell where and when each piece of work ran, and how often.
 */
import { appendFileSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { z } from 'zod';
import { defineServer } from '../src/server/module/module.js';

export interface RunEvent {
  tool: string;
  key: string;
  event: 'start' | 'end' | 'step';
  step?: string;
  pid: number;
  at: number;
}

function record(e: Omit<RunEvent, 'pid' | 'at'>): void {
  const log = process.env.OUTLAST_RUN_LOG;
  if (log) appendFileSync(log, JSON.stringify({ ...e, pid: process.pid, at: Date.now() }) + '\n');
}

const timed = { key: z.string(), ms: z.number().int().min(0) };
const text = (o: Record<string, unknown>) => ({ content: [{ type: 'text' as const, text: JSON.stringify({ ...o, pid: process.pid }) }] });

export default defineServer({
  info: { name: 'deploy-tests', version: '0.0.0' },
  setup(outlast) {
    outlast.tool('unsafe', { description: 'Works ms; not safe to re-run.', inputSchema: timed, policy: 'always' }, async ({ key, ms }, ctx) => {
      record({ tool: 'unsafe', key, event: 'start' });
      await delay(ms, undefined, { signal: ctx.signal });
      record({ tool: 'unsafe', key, event: 'end' });
      return text({ key });
    });
    outlast.tool('safe', { description: 'Works ms; safe to re-run.', inputSchema: timed, policy: 'always', retrySafe: true }, async ({ key, ms }, ctx) => {
      record({ tool: 'safe', key, event: 'start' });
      await delay(ms, undefined, { signal: ctx.signal });
      record({ tool: 'safe', key, event: 'end' });
      return text({ key, attempt: ctx.attempt });
    });
    outlast.tool(
      'durable',
      { description: 'Runs `steps` steps of stepMs each, none of them idempotent.', inputSchema: { key: z.string(), steps: z.number().int().min(1), stepMs: z.number().int().min(0) }, policy: 'always', durable: true },
      async ({ key, steps, stepMs }, ctx) => {
        const ran: number[] = [];
        for (let i = 1; i <= steps; i++) {
          ran.push(
            await ctx.step(`s${i}`, async ({ signal }) => {
              record({ tool: 'durable', key, event: 'step', step: `s${i}` });
              await delay(stepMs, undefined, { signal });
              return process.pid;
            }),
          );
        }
        return text({ key, stepPids: ran });
      },
    );
    outlast.tool('ask', { description: 'Asks a question and answers with it; not durable, not safe to re-run.', inputSchema: { key: z.string() }, policy: 'always' }, async ({ key }, ctx) => {
      record({ tool: 'ask', key, event: 'start' });
      const answer = await ctx.elicit(`Go ahead with ${key}?`, { type: 'object', properties: { ok: { type: 'boolean' } } }, { key: 'go' });
      record({ tool: 'ask', key, event: 'end' });
      return text({ key, action: answer.action, content: answer.content ?? null });
    });
  },
});
