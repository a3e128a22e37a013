/**
 * Parking on PostgreSQL: a durable handler's wait lets go of its task (rules.parkChange, written conditionally on the
 * version read: an answer committed in between makes the write match nothing, and the rule is applied again), and the
 * earliest wake to come. Resuming is the run queue's claim (outlast_claim): a parked task is claimable once
 * queued_at <= now, like a queued one, under the same SKIP LOCKED.
 */
import { TASK_COLUMNS } from '../task-columns.js';

export const PARKING_QUERIES = {
  park: `UPDATE tasks SET owner = NULL, parked_at = $3, queued_at = $4, updated_at = $3, version = version + 1
    WHERE task_id = $1 AND version = $2 RETURNING ${TASK_COLUMNS}`,
  // Only parked tasks are claimable in the future; the (queued_at) index answers it.
  nextWake: 'SELECT min(queued_at) AS t FROM tasks WHERE queued_at > $1',
};
