/** Re-reads that follow signals: one at a time, and a call while one runs makes it run once more after it, so what
 *  changed meanwhile is read without piling up reads. */
export function coalesced(run: () => Promise<void>): () => Promise<void> {
  let running = false;
  let again = false;
  return async () => {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        await run();
      } while (again);
    } finally {
      running = false;
    }
  };
}
