/**
 * Questions put to a caller: which stream of a task's caller holds each open question (asked, not yet answered), so a
 * question reaches its person once however many streams (status calls, on any replica) follow the task. The mark is
 * taken before a question goes out and given back only when the stream that asked ended without an answer.
 */

/** The migration that adds the marks, one number on both backends. */
export const ASKS_MIGRATION = 11;
