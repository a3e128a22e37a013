/** What one webhook delivery attempt came to: shared by task-event deliveries (events.ts) and output deliveries
 *  (output-events.ts). */
export type DeliveryOutcome =
  | { delivered: true; status: number; now: number }
  | { delivered: false; status: number | null; error: string; retryAt: number | null; now: number; deactivateAfter: number };
