/**
 * The client's journal: one SQLite row per logical tool call (better-sqlite3, WAL, synchronous=FULL), written
 * before the call is sent and again, committed, before a task id is reported to anyone. It holds what `resume`
 * needs after a crash or restart (server URL, tool, arguments, idempotency key, task id, last known state,
 * answers already given) and each terminal outcome until the application has read it.
 */
import type Database from 'better-sqlite3';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { DetailedTask, JsonObject, Task } from '../protocol/index.js';
import { openSqlite } from '../store/sqlite/open.js';

/** Numbered migrations, applied in order at open, each once, in a transaction. */
export const JOURNAL_MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
CREATE TABLE calls (
  call_id             TEXT PRIMARY KEY,   -- also the idempotency key sent as _meta["outlast/idempotencyKey"]
  server_url          TEXT NOT NULL,
  tool                TEXT NOT NULL,
  arguments           TEXT NOT NULL,
  task_id             TEXT,               -- set (and committed) before the task is reported
  state               TEXT NOT NULL CHECK (state IN ('calling','working','input_required','completed','failed','cancelled','expired','not_found')),
  inline              INTEGER NOT NULL DEFAULT 0,
  status_message      TEXT,
  poll_interval_ms    INTEGER,
  ttl_ms              INTEGER,
  task_created_at     TEXT,
  outcome             TEXT,               -- completed: the CallToolResult; failed: the JSON-RPC error
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  finished_at         INTEGER,
  read_at             INTEGER,
  cancel_requested_at INTEGER
);
CREATE INDEX calls_task ON calls (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX calls_unfinished ON calls (server_url) WHERE state IN ('calling','working','input_required');
CREATE TABLE answers (
  call_id   TEXT NOT NULL REFERENCES calls (call_id) ON DELETE CASCADE,
  input_key TEXT NOT NULL,
  response  TEXT NOT NULL,
  sent_at   INTEGER,
  PRIMARY KEY (call_id, input_key)
);
`,
  },
  {
    version: 2,
    // The seq of the last output item delivered to the application (TaskClient's onOutput / output()), so a
    // restarted client continues the task's output after it.
    sql: `ALTER TABLE calls ADD COLUMN output_seq INTEGER;`,
  },
];

export type JournalState = 'calling' | 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled' | 'expired' | 'not_found';
export const UNFINISHED_STATES: readonly JournalState[] = ['calling', 'working', 'input_required'];

export interface JournalEntry {
  callId: string;
  serverUrl: string;
  tool: string;
  arguments: JsonObject;
  taskId?: string;
  state: JournalState;
  /** The server answered the call with a plain result (no task). */
  inline: boolean;
  statusMessage?: string;
  pollIntervalMs?: number;
  ttlMs?: number | null;
  taskCreatedAt?: string;
  /** completed: the CallToolResult; failed: the JSON-RPC error object. */
  outcome?: JsonObject;
  createdAt: number;
  updatedAt: number;
  finishedAt?: number;
  readAt?: number;
  cancelRequestedAt?: number;
  /** The seq of the last output item delivered (absent: none yet). */
  outputSeq?: number;
}

interface Row {
  call_id: string;
  server_url: string;
  tool: string;
  arguments: string;
  task_id: string | null;
  state: JournalState;
  inline: number;
  status_message: string | null;
  poll_interval_ms: number | null;
  ttl_ms: number | null;
  task_created_at: string | null;
  outcome: string | null;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
  read_at: number | null;
  cancel_requested_at: number | null;
  output_seq: number | null;
}

function toEntry(r: Row): JournalEntry {
  const e: JournalEntry = {
    callId: r.call_id,
    serverUrl: r.server_url,
    tool: r.tool,
    arguments: JSON.parse(r.arguments) as JsonObject,
    state: r.state,
    inline: r.inline === 1,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
  if (r.task_id !== null) e.taskId = r.task_id;
  if (r.status_message !== null) e.statusMessage = r.status_message;
  if (r.poll_interval_ms !== null) e.pollIntervalMs = r.poll_interval_ms;
  if (r.task_id !== null) e.ttlMs = r.ttl_ms;
  if (r.task_created_at !== null) e.taskCreatedAt = r.task_created_at;
  if (r.outcome !== null) e.outcome = JSON.parse(r.outcome) as JsonObject;
  if (r.finished_at !== null) e.finishedAt = r.finished_at;
  if (r.read_at !== null) e.readAt = r.read_at;
  if (r.cancel_requested_at !== null) e.cancelRequestedAt = r.cancel_requested_at;
  if (r.output_seq !== null) e.outputSeq = r.output_seq;
  return e;
}

/** Where the CLI keeps its journal: $OUTLAST_JOURNAL, else the user's state folder. */
export function defaultJournalPath(env: NodeJS.ProcessEnv = process.env, platform: NodeJS.Platform = process.platform): string {
  if (env.OUTLAST_JOURNAL) return env.OUTLAST_JOURNAL;
  if (platform === 'win32') return join(env.LOCALAPPDATA ?? join(homedir(), 'AppData', 'Local'), 'outlast', 'journal.db');
  if (platform === 'darwin') return join(homedir(), 'Library', 'Application Support', 'outlast', 'journal.db');
  return join(env.XDG_STATE_HOME || join(homedir(), '.local', 'state'), 'outlast', 'journal.db');
}

export interface JournalOptions {
  /** `full` (default): every write survives power loss. */
  durability?: 'full' | 'process';
  /** Read outcomes older than this are deleted at open. Default 30 days; 0 keeps everything. */
  keepReadMs?: number;
}

export class Journal {
  readonly path: string;
  private readonly db: Database.Database;
  private readonly stmts;

  constructor(path: string, options: JournalOptions = {}) {
    this.path = path;
    this.db = openSqlite(path, {
      ...(options.durability ? { durability: options.durability } : {}),
      migrations: JOURNAL_MIGRATIONS,
      migrationsTable: 'outlast_journal_migrations',
      what: 'the journal',
    });
    const db = this.db;
    this.stmts = {
      begin: db.prepare(
        `INSERT INTO calls (call_id, server_url, tool, arguments, state, created_at, updated_at) VALUES (?, ?, ?, ?, 'calling', ?, ?)`,
      ),
      taskCreated: db.prepare(
        `UPDATE calls SET task_id = ?, state = ?, status_message = ?, poll_interval_ms = ?, ttl_ms = ?, task_created_at = ?, updated_at = ?
         WHERE call_id = ? AND state IN ('calling','working','input_required')`,
      ),
      progress: db.prepare(
        `UPDATE calls SET state = ?, status_message = ?, poll_interval_ms = COALESCE(?, poll_interval_ms), ttl_ms = ?, updated_at = ?
         WHERE call_id = ? AND state IN ('calling','working','input_required')`,
      ),
      finish: db.prepare(
        `UPDATE calls SET state = ?, status_message = COALESCE(?, status_message), outcome = ?, inline = ?, finished_at = ?, updated_at = ?, read_at = ?
         WHERE call_id = ? AND state IN ('calling','working','input_required')`,
      ),
      markRead: db.prepare(`UPDATE calls SET read_at = ? WHERE call_id = ? AND read_at IS NULL AND finished_at IS NOT NULL`),
      cancelRequested: db.prepare(`UPDATE calls SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ? WHERE call_id = ?`),
      get: db.prepare(`SELECT * FROM calls WHERE call_id = ?`),
      byTask: db.prepare(`SELECT * FROM calls WHERE task_id = ? ORDER BY created_at DESC`),
      byPrefix: db.prepare(`SELECT * FROM calls WHERE task_id LIKE ? ESCAPE '\\' OR call_id LIKE ? ESCAPE '\\' ORDER BY created_at DESC LIMIT 5`),
      all: db.prepare(`SELECT * FROM calls ORDER BY created_at`),
      pendingWork: db.prepare(
        `SELECT * FROM calls WHERE state IN ('calling','working','input_required') OR (finished_at IS NOT NULL AND read_at IS NULL) ORDER BY created_at`,
      ),
      saveAnswer: db.prepare(`INSERT OR IGNORE INTO answers (call_id, input_key, response) VALUES (?, ?, ?)`),
      answerSent: db.prepare(`UPDATE answers SET sent_at = ? WHERE call_id = ? AND input_key = ?`),
      answers: db.prepare(`SELECT input_key, response, sent_at FROM answers WHERE call_id = ?`),
      outputDelivered: db.prepare(`UPDATE calls SET output_seq = MAX(COALESCE(output_seq, 0), ?) WHERE task_id = ?`),
      outputSeq: db.prepare(`SELECT MAX(output_seq) AS seq FROM calls WHERE task_id = ?`),
      prune: db.prepare(`DELETE FROM calls WHERE read_at IS NOT NULL AND read_at < ?`),
      forget: db.prepare(`DELETE FROM calls WHERE call_id = ?`),
    };
    const keep = options.keepReadMs ?? 30 * 24 * 3600_000;
    if (keep > 0) this.stmts.prune.run(Date.now() - keep);
  }

  /** Deletes a call and its answers (its owner keeps its own record of it). */
  forget(callId: string): void {
    this.stmts.forget.run(callId);
  }

  /** Records a logical call before it is sent. */
  begin(call: { callId: string; serverUrl: string; tool: string; arguments: JsonObject }): JournalEntry {
    const now = Date.now();
    this.stmts.begin.run(call.callId, call.serverUrl, call.tool, JSON.stringify(call.arguments), now, now);
    return this.get(call.callId)!;
  }

  /** The call became a task. Committed before anyone is told the task id. */
  taskCreated(callId: string, task: Task): void {
    this.stmts.taskCreated.run(
      task.taskId,
      task.status === 'input_required' ? 'input_required' : 'working',
      task.statusMessage ?? null,
      task.pollIntervalMs ?? null,
      task.ttlMs ?? null,
      task.createdAt ?? null,
      Date.now(),
      callId,
    );
  }

  /** A non-terminal state seen, or a terminal one (then its outcome is kept until read). */
  record(callId: string, task: DetailedTask): void {
    const now = Date.now();
    switch (task.status) {
      case 'working':
      case 'input_required':
        this.stmts.progress.run(task.status, task.statusMessage ?? null, task.pollIntervalMs ?? null, task.ttlMs ?? null, now, callId);
        return;
      case 'completed':
        this.stmts.finish.run('completed', task.statusMessage ?? null, JSON.stringify(task.result), 0, now, now, null, callId);
        return;
      case 'failed':
        this.stmts.finish.run('failed', task.statusMessage ?? null, JSON.stringify(task.error), 0, now, now, null, callId);
        return;
      case 'cancelled':
        this.stmts.finish.run('cancelled', task.statusMessage ?? null, null, 0, now, now, null, callId);
        return;
    }
  }

  /** The server answered the call itself with a plain result. */
  finishInline(callId: string, result: JsonObject): void {
    const now = Date.now();
    this.stmts.finish.run('completed', null, JSON.stringify(result), 1, now, now, null, callId);
  }

  /** `tools/call` itself was refused with a JSON-RPC error (reported to the caller at once, so read). */
  callRefused(callId: string, error: JsonObject): void {
    const now = Date.now();
    this.stmts.finish.run('failed', null, JSON.stringify(error), 1, now, now, now, callId);
  }

  /** The server says the task expired / is not known. Kept until read, like any outcome. */
  gone(callId: string, reason: 'expired' | 'not_found', message: string): void {
    const now = Date.now();
    this.stmts.finish.run(reason, message, null, 0, now, now, null, callId);
  }

  markRead(callId: string): void {
    this.stmts.markRead.run(Date.now(), callId);
  }

  cancelRequested(callId: string): void {
    const now = Date.now();
    this.stmts.cancelRequested.run(now, now, callId);
  }

  /** Stores an answer before it is sent, so a crash between the two does not ask the human again. */
  saveAnswer(callId: string, key: string, response: JsonObject): void {
    this.stmts.saveAnswer.run(callId, key, JSON.stringify(response));
  }

  answerSent(callId: string, key: string): void {
    this.stmts.answerSent.run(Date.now(), callId, key);
  }

  answers(callId: string): Map<string, { response: JsonObject; sent: boolean }> {
    const rows = this.stmts.answers.all(callId) as Array<{ input_key: string; response: string; sent_at: number | null }>;
    return new Map(rows.map((r) => [r.input_key, { response: JSON.parse(r.response) as JsonObject, sent: r.sent_at !== null }]));
  }

  /** Output up to `seq` of the task was delivered (never moves back). */
  outputDelivered(taskId: string, seq: number): void {
    this.stmts.outputDelivered.run(seq, taskId);
  }

  /** The seq of the task's last output item delivered (0: none, or the task is not in the journal). */
  outputSeq(taskId: string): number {
    return ((this.stmts.outputSeq.get(taskId) as { seq: number | null } | undefined)?.seq ?? 0);
  }

  get(callId: string): JournalEntry | undefined {
    const r = this.stmts.get.get(callId) as Row | undefined;
    return r ? toEntry(r) : undefined;
  }

  /** Entries whose task id (or call id) is `id`, or starts with `id` when no exact match exists. */
  find(id: string): JournalEntry[] {
    const exact = (this.stmts.byTask.all(id) as Row[]).map(toEntry);
    if (exact.length) return exact;
    const byCall = this.get(id);
    if (byCall) return [byCall];
    const like = id.replace(/[\\%_]/g, (c) => `\\${c}`) + '%';
    return (this.stmts.byPrefix.all(like, like) as Row[]).map(toEntry);
  }

  list(): JournalEntry[] {
    return (this.stmts.all.all() as Row[]).map(toEntry);
  }

  /** Unfinished calls, and finished ones whose outcome nobody has read yet. */
  pending(serverUrl?: string): JournalEntry[] {
    const all = (this.stmts.pendingWork.all() as Row[]).map(toEntry);
    return serverUrl === undefined ? all : all.filter((e) => e.serverUrl === serverUrl);
  }

  get isOpen(): boolean {
    return this.db.open;
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
