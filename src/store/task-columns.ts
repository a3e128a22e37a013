/**
 * The task columns every backend's statements read, by name (same names in each dialect). Named, never `*`: a
 * statement's result shape must not change when a later migration adds a column, so replicas of the release before
 * keep their prepared statements through a rolling upgrade (CONTRIBUTING.md, "Migrations").
 */

/** Every column a task record is made of (the operator's own columns are read by the operator's statements). */
export const TASK_COLUMNS = 'task_id, principal, tool, args, status, status_message, created_at, updated_at, ttl_ms, expires_at, input_since, ' +
  'poll_interval_ms, result, error, input_requests, input_responses, cancel_requested_at, owner, queued_at, epoch, parked_at, attempts, ' +
  'retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, version, retrieved_at, trace_context, output_seq';

/** What a poll reads (tasks/get): the view of a task. */
export const VIEW_COLUMNS = 'task_id, principal, status, status_message, created_at, updated_at, ttl_ms, expires_at, poll_interval_ms, result, error, input_requests, retrieved_at, version, queued_at, parked_at, output_seq';

