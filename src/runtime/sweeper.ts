/** The sweeper: tasks whose TTL passed become tombstones (unfinished work is cancelled), old tombstones go. */
import { isTerminal } from '../protocol/index.js';
import type { SignalKind } from '../store/local-bus.js';
import type { TaskStore } from '../store/types.js';
import { TaskCancelledError } from './context.js';
import type { Execution } from './execution.js';
import type { RuntimeAlert } from './types.js';

export interface SweepHost {
  readonly store: TaskStore;
  readonly running: Map<string, Execution>;
  publish(taskId: string, kind?: SignalKind): void;
  alert(a: RuntimeAlert): void;
}

export interface SweepOptions {
  tombstoneRetentionMs: number;
  cancelOnExpiry: boolean;
}

const BATCH = 1000;

export async function sweepExpired(host: SweepHost, opts: SweepOptions, now: number): Promise<{ expired: number; purged: number }> {
  let expired = 0;
  let purged = 0;
  for (;;) {
    const r = await host.store.sweep(now, opts.tombstoneRetentionMs, BATCH);
    expired += r.expired.length;
    purged += r.purged;
    for (const t of r.expired) {
      const exec = host.running.get(t.taskId);
      if (exec && opts.cancelOnExpiry) {
        exec.abandoned = true;
        exec.abort(new TaskCancelledError('expired'));
      }
      if (!isTerminal(t.status)) {
        const still = t.queued ? 'queued (it never started)' : t.parked ? `${t.status}, parked (no handler held it)` : t.status;
        host.alert({ kind: 'expired-unfinished', taskId: t.taskId, tool: t.tool, message: `task ${t.taskId} (${t.tool}) reached its TTL while still ${still}` });
      } else if (t.status === 'failed' && !t.retrieved) {
        host.alert({ kind: 'failed-unretrieved', taskId: t.taskId, tool: t.tool, message: `task ${t.taskId} (${t.tool}) failed and expired without anyone reading the failure` });
      }
      host.publish(t.taskId);
    }
    if (r.expired.length < BATCH && r.purged < BATCH) break;
  }
  return { expired, purged };
}
