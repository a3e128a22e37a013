/**
 * Preloaded into an `outlast serve` (or `outlast gateway`) process by the soak and the rows that measure a CLI
 * process (node --expose-gc --import heap-probe.js): on {type:'heap'} over IPC, runs full garbage collections and
 * answers {type:'heap', heapUsed, heapTotal, rss, external}; answers {type:'cpu'} and takes CPU profiles as the
 * bench's own server children do (common.ts). Exits with the parent (the channel closing), so it never outlives the
 * bench.
 */
import { answerCpuUsage, installProfiler } from './common.js';

answerCpuUsage();
installProfiler();
const gc = (globalThis as { gc?: () => void }).gc;

process.on('message', (m: { type?: string } | null) => {
  if (m?.type !== 'heap') return;
  void (async () => {
    // Several passes, a turn apart: weak callbacks and finalizers of one pass free more in the next.
    for (let i = 0; i < 4; i++) {
      gc?.();
      await new Promise((r) => setTimeout(r, 25));
    }
    const mu = process.memoryUsage();
    process.send?.({ type: 'heap', gc: gc !== undefined, heapUsed: mu.heapUsed, heapTotal: mu.heapTotal, rss: mu.rss, external: mu.external });
  })();
});
process.on('disconnect', () => process.exit(0));
