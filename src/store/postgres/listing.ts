/** Listings of the PostgreSQL store: keyset-paged, newest first, each one range read of an index. */
import { SUMMARY_COLUMNS } from '../summary.js';

export const LISTING_QUERIES = {
  listByPrincipal: `SELECT ${SUMMARY_COLUMNS} FROM tasks WHERE principal = $1 ORDER BY created_at DESC, task_id DESC LIMIT $2`,
  listByPrincipalAfter: `SELECT ${SUMMARY_COLUMNS} FROM tasks WHERE principal = $1 AND (created_at, task_id) < ($2, $3)
    ORDER BY created_at DESC, task_id DESC LIMIT $4`,
};
