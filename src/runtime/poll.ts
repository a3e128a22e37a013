/**
 * pollIntervalMs is a load contract: advertised from the task's age and its tool's granularity, and polls far
 * faster than advertised are refused once a burst allowance is spent.
 */
import type { TaskRecord } from '../store/types.js';

export interface PollPolicy {
  /** Never advertise less than this. Default 250. */
  minMs: number;
  /** Never advertise more than this. Default 30 000. */
  maxMs: number;
  /** The interval grows to this fraction of the task's age (a job that ran for 10 min is polled every minute). Default 0.1. */
  ageFactor: number;
}

export const DEFAULT_POLL_POLICY: PollPolicy = { minMs: 250, maxMs: 30_000, ageFactor: 0.1 };

/** The interval to advertise now: at least the tool's own granularity, growing with the task's age. */
export function advertisedPollInterval(rec: Pick<TaskRecord, 'pollIntervalMs' | 'createdAt' | 'status'>, now: number, policy: PollPolicy): number {
  const base = Math.max(policy.minMs, rec.pollIntervalMs);
  const byAge = (now - rec.createdAt) * policy.ageFactor;
  const raw = Math.min(policy.maxMs, Math.max(base, byAge));
  // Round to 50 ms so the value is stable between polls.
  return Math.max(policy.minMs, Math.round(raw / 50) * 50);
}

export interface PollLimitOptions {
  /** Polls may come this many times faster than advertised, on average, before being refused. Default 4. */
  factor: number;
  /** Polls allowed back to back before the rate counts. Default 10. */
  burst: number;
  /** Entries kept (oldest evicted first). Default 100 000. */
  maxEntries: number;
}

export const DEFAULT_POLL_LIMIT: PollLimitOptions = { factor: 4, burst: 10, maxEntries: 100_000 };

interface Bucket {
  tokens: number;
  at: number;
  intervalMs: number;
}

/**
 * A token bucket per (principal, task): capacity `burst`, refilled at `factor` tokens per advertised interval.
 * Memory is bounded by `maxEntries`.
 */
export class PollGovernor {
  private readonly buckets = new Map<string, Bucket>();
  constructor(private readonly opts: PollLimitOptions = DEFAULT_POLL_LIMIT) {}

  /** Takes one token; returns 0 when allowed, or the milliseconds to wait. */
  check(principal: string, taskId: string, now: number): number {
    const key = `${principal}\u0000${taskId}`;
    const b = this.buckets.get(key);
    if (!b) return 0; // never advertised to this caller: nothing to hold them to
    const refill = ((now - b.at) * this.opts.factor) / b.intervalMs;
    b.tokens = Math.min(this.opts.burst, b.tokens + refill);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - b.tokens) * b.intervalMs) / this.opts.factor);
  }

  /** Records the interval just advertised to this caller for this task (or forgets it when terminal). */
  advertised(principal: string, taskId: string, intervalMs: number | undefined, now: number): void {
    const key = `${principal}\u0000${taskId}`;
    if (intervalMs === undefined) {
      this.buckets.delete(key);
      return;
    }
    const b = this.buckets.get(key);
    if (b) {
      b.intervalMs = intervalMs;
      return;
    }
    if (this.buckets.size >= this.opts.maxEntries) {
      const oldest = this.buckets.keys().next().value;
      if (oldest !== undefined) this.buckets.delete(oldest);
    }
    this.buckets.set(key, { tokens: this.opts.burst - 1, at: now, intervalMs });
  }

  get size(): number {
    return this.buckets.size;
  }
}
