/**
 * The database's clock, read without a round trip per decision: the offset of PostgreSQL's `clock_timestamp()` from
 * this process's clock, measured at open (the best of a few samples: the one with the shortest round trip, whose
 * error is at most half of it) and again every `resampleMs`, so a replica whose own clock is wrong (skew, a step by
 * NTP, `faketime`) still decides creation times, expiry, claims, wakes and deadlines on the store's time.
 */
import type pg from 'pg';

/** Where the samples are read (the store's pool). */
interface Sampled {
  query<R extends pg.QueryResultRow>(text: string): Promise<pg.QueryResult<R>>;
}

const SAMPLE = 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS t';

export interface ClockSample {
  offsetMs: number;
  rttMs: number;
}

/** One reading: the database's time minus the midpoint of the round trip on this process's clock. */
export async function sampleOffset(pool: Sampled): Promise<ClockSample> {
  const t0 = Date.now();
  const r = await pool.query<{ t: number }>(SAMPLE);
  const t1 = Date.now();
  return { offsetMs: Number(r.rows[0]!.t) - (t0 + t1) / 2, rttMs: t1 - t0 };
}

export class StoreClock {
  private offsetMs = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly pool: Sampled, private readonly resampleMs = 10_000) {}

  /** Takes the best of `n` samples, then keeps the offset fresh in the background. */
  async start(n = 3): Promise<void> {
    let best: ClockSample | undefined;
    for (let i = 0; i < n; i++) {
      const s = await sampleOffset(this.pool);
      if (!best || s.rttMs < best.rttMs) best = s;
    }
    this.offsetMs = best!.offsetMs;
    this.timer = setInterval(() => {
      // A slow sample (a loaded pool) would be a worse estimate than the one we hold: only a tight one replaces it.
      sampleOffset(this.pool).then((s) => {
        if (s.rttMs <= 50) this.offsetMs = s.offsetMs;
      }, () => undefined);
    }, this.resampleMs);
    this.timer.unref();
  }

  /** Epoch ms on the database's clock. */
  now(): number {
    return Math.round(Date.now() + this.offsetMs);
  }

  /** How far this process's clock is behind the database's (ms; negative: ahead). */
  get offset(): number {
    return this.offsetMs;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
