/** A task to create in a kit's tests: fresh id, the defaults every kit assumes, any field overridden. */
import { randomBytes } from 'node:crypto';
import type { NewTask } from '../types.js';

let seq = 0;
export function newTask(overrides: Partial<NewTask> = {}): NewTask {
  seq += 1;
  return {
    taskId: `t-${randomBytes(8).toString('hex')}-${seq}`,
    principal: 'alice',
    tool: 'build',
    args: { n: seq },
    createdAt: Date.now(),
    ttlMs: 60_000,
    pollIntervalMs: 500,
    owner: 'replica-a',
    retrySafe: false,
    clientCapabilities: { elicitation: {} },
    ...overrides,
  };
}
