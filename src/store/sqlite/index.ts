/**
 * SQLite task store on better-sqlite3 12: WAL, synchronous=FULL by default, creations group-committed
 * (one transaction per event-loop turn; nobody is answered before the commit that holds their row).
 */
import type Database from 'better-sqlite3';
import { isTerminal, type JsonObject, type TaskOrigin, type TaskStatus } from '../../protocol/index.js';
import { answerInput, askInput, expireInputs, parkChange, readsExpired, refusalOf, ttlAfterWait, type InputChange } from '../rules.js';
import {
  IdempotencyConflictError,
  TaskWriteRefused,
  type NewTask,
  type Outcome,
  type PendingInput,
  type ListCursor,
  type ParkRequest,
  type PrincipalLoad,
  type ParkResult,
  type QueueClaim,
  type ReplicaInfo,
  type StepRecord,
  type StepWrite,
  type SweepResult,
  type TaskLookup,
  type TaskRecord,
  type TaskStore,
  type TaskSummary,
  type TaskView,
  type WriteFence,
} from '../types.js';
import { MIGRATIONS } from './schema.js';
import { endedRecord, newRecord } from '../new-record.js';
import { TASK_COLUMNS, VIEW_COLUMNS } from '../task-columns.js';
import { openSqlite } from './open.js';
import { QueuePositions, claimRows, prepareQueue } from './queue.js';
import { prepareSettings } from './settings.js';
import { prepareAsks, type SqliteAsks } from './asks.js';
import { prepareListing, type Listing } from './listing.js';
import { prepareParking, type SqliteParking } from './parking.js';
import { prepareSteps, type SqliteSteps } from './steps.js';
import { applyHistorySetting, sqliteOps } from './ops.js';
import { sqliteOperatorSessions } from './operator-sessions.js';
import type { OperatorSessionStore } from '../operator-sessions.js';
import { sqliteEvents } from './events.js';
import { outputCursorStarter, sqliteOutputEvents } from './output-events.js';
import type { OutputEventStore } from '../output-events.js';
import { sqliteOutput } from './output.js';
import type { OutputStore } from '../output.js';
import type { EventStore } from '../events.js';
import type { OperatorStore } from '../types.js';

export interface SqliteStoreOptions {
  /** `full` (default): a commit survives power loss. `process`: synchronous=NORMAL, survives a process crash only. */
  durability?: 'full' | 'process';
  /** Milliseconds to wait on a lock held by another connection. Default 5000. */
  busyTimeoutMs?: number;
  /** Group commit (default true): the writes of one event-loop turn share one transaction, and each caller is
   *  answered only after that transaction commits. false: one transaction per write. */
  groupCommit?: boolean;
  /** Record each task's transitions (the dashboard's history; default true). A setting of the file, applied at
   *  start-up: the last process to open it decides. */
  history?: boolean;
}

interface Row {
  task_id: string;
  principal: string;
  tool: string;
  args: string;
  status: TaskStatus;
  status_message: string | null;
  created_at: number;
  updated_at: number;
  ttl_ms: number | null;
  expires_at: number | null;
  input_since: number | null;
  poll_interval_ms: number;
  result: string | null;
  error: string | null;
  input_requests: string;
  input_responses: string;
  cancel_requested_at: number | null;
  owner: string | null;
  queued_at: number | null;
  epoch: number;
  parked_at: number | null;
  attempts: number;
  retry_safe: number;
  idem_key: string | null;
  request_hash: string | null;
  client_capabilities: string;
  origin: TaskOrigin;
  progress_token: string | null;
  version: number;
  retrieved_at: number | null;
  trace_context: string | null;
  output_seq: number;
}


function toView(r: Row): TaskView {
  return {
    taskId: r.task_id,
    principal: r.principal,
    status: r.status,
    statusMessage: r.status_message,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    ttlMs: r.ttl_ms,
    pollIntervalMs: r.poll_interval_ms,
    result: r.result === null ? null : JSON.parse(r.result),
    error: r.error === null ? null : JSON.parse(r.error),
    inputRequests: r.input_requests === '{}' ? {} : JSON.parse(r.input_requests),
    retrievedAt: r.retrieved_at,
    version: r.version,
    queuedAt: r.queued_at,
    parkedAt: r.parked_at,
    outputSeq: r.output_seq,
  };
}

/** The full row. Written out field by field (not spread from toView): this is on the creation hot path. */
function toRecord(r: Row): TaskRecord {
  return {
    taskId: r.task_id,
    principal: r.principal,
    tool: r.tool,
    args: JSON.parse(r.args),
    status: r.status,
    statusMessage: r.status_message,
    createdAt: r.created_at,
    updatedAt: r.updated_at,
    ttlMs: r.ttl_ms,
    expiresAt: r.expires_at,
    inputSince: r.input_since,
    pollIntervalMs: r.poll_interval_ms,
    result: r.result === null ? null : JSON.parse(r.result),
    error: r.error === null ? null : JSON.parse(r.error),
    inputRequests: JSON.parse(r.input_requests),
    inputResponses: JSON.parse(r.input_responses),
    cancelRequestedAt: r.cancel_requested_at,
    owner: r.owner,
    queuedAt: r.queued_at,
    epoch: r.epoch,
    parkedAt: r.parked_at,
    wakeAt: r.parked_at === null ? null : r.queued_at,
    attempts: r.attempts,
    retrySafe: r.retry_safe === 1,
    idempotencyKey: r.idem_key,
    requestHash: r.request_hash,
    clientCapabilities: JSON.parse(r.client_capabilities),
    origin: r.origin,
    progressToken: r.progress_token === null ? null : JSON.parse(r.progress_token),
    version: r.version,
    retrievedAt: r.retrieved_at,
    traceContext: r.trace_context === null ? null : JSON.parse(r.trace_context),
    outputSeq: r.output_seq,
  };
}

const UNFINISHED = `status IN ('working','input_required')`;

interface PendingWrite {
  op: () => unknown;
  /** The op writes with one statement at most (a read after it may explain a refusal): SQLite makes that statement
   *  atomic by itself, so it needs no transaction of its own when alone, nor a savepoint inside a group. */
  oneStatement: boolean;
  resolve: (v: never) => void;
  reject: (e: unknown) => void;
}

export class SqliteTaskStore implements TaskStore {
  readonly backend = 'sqlite';

  /** The file's processes share one machine and so one clock: the system clock of this host. */
  now(): number {
    return Date.now();
  }
  readonly path: string;
  /** Set at open when the file's schema is newer than this build and keeps it working (a rollback): the line to log. */
  schemaAhead: string | undefined;
  private db!: Database.Database;
  private readonly options: Required<SqliteStoreOptions>;
  private queue: PendingWrite[] = [];
  private flushScheduled = false;
  private s!: ReturnType<SqliteTaskStore['prepare']>;
  private queueQ!: ReturnType<typeof prepareQueue>;
  private positions!: QueuePositions;
  private secret!: ReturnType<typeof prepareSettings>;
  private listing!: Listing;
  private steps!: SqliteSteps;
  private parking!: SqliteParking;
  private asks!: SqliteAsks;
  /** The write transactions, made once (better-sqlite3 prepares a transaction's statements when it is made). */
  private runOne!: Database.Transaction<(op: () => unknown) => unknown>;
  private runBatch!: Database.Transaction<(batch: PendingWrite[], outcomes: Array<{ ok: boolean; value: unknown }>) => void>;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.path = path;
    this.options = { durability: 'full', busyTimeoutMs: 5000, groupCommit: true, history: true, ...options };
  }

  async init(): Promise<void> {
    if (this.db) return;
    const db = openSqlite(this.path, {
      durability: this.options.durability,
      busyTimeoutMs: this.options.busyTimeoutMs,
      migrations: MIGRATIONS,
      migrationsTable: 'outlast_migrations',
      what: 'the task store',
      schemaAhead: (line) => (this.schemaAhead = line),
    });
    this.db = db;
    this.s = this.prepare(db);
    this.queueQ = prepareQueue(db);
    this.positions = new QueuePositions(db, this.queueQ.position);
    this.secret = prepareSettings(db);
    this.listing = prepareListing(db);
    this.steps = prepareSteps(db);
    this.parking = prepareParking(db);
    this.asks = prepareAsks(db);
    this.runOne = db.transaction((op: () => unknown) => op());
    this.runBatch = db.transaction((batch: PendingWrite[], outcomes: Array<{ ok: boolean; value: unknown }>) => {
      batch.forEach((p, i) => {
        if (p.oneStatement) {
          // A statement that fails undoes its own changes; the transaction goes on.
          try {
            outcomes[i] = { ok: true, value: p.op() };
          } catch (error) {
            outcomes[i] = { ok: false, value: error };
          }
          return;
        }
        this.s.savepoint.run();
        try {
          outcomes[i] = { ok: true, value: p.op() };
          this.s.release.run();
        } catch (error) {
          this.s.rollbackTo.run();
          this.s.release.run();
          outcomes[i] = { ok: false, value: error };
        }
      });
    });
    applyHistorySetting(db, this.options.history);
    this.ops = sqliteOps(db, (op) => this.write(op), (taskId) => this.get(taskId));
    this.events = sqliteEvents(db, (op) => this.write(op), outputCursorStarter(db));
    this.outputEvents = sqliteOutputEvents(db, (op) => this.write(op));
    this.output = sqliteOutput(db, (op) => this.write(op));
    this.operatorSessions = sqliteOperatorSessions(db, (op) => this.write(op));
  }

  /** Dashboard sign-ins; see ./operator-sessions.ts. */
  operatorSessions!: OperatorSessionStore;

  /** MCP Events: subscriptions, the change log, deliveries; see ./events.ts. */
  events!: EventStore;
  /** Webhook delivery of task output: per-subscription cursors; see ./output-events.ts. */
  outputEvents!: OutputEventStore;

  /** The operator side (dashboard, alerts); see ./ops.ts. */
  ops!: OperatorStore;

  /** Task output; see ./output.ts. */
  output!: OutputStore;
  /** A run that ended before its row's write is written finished in it (NewTask.endedBy). */
  readonly writesEndedAtCreation = true;

  private prepare(db: Database.Database) {
    return {
      insert: db.prepare(`INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at,
          ttl_ms, expires_at, input_since, poll_interval_ms, owner, queued_at, retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, trace_context)
        VALUES (@taskId, @principal, @tool, @args, @status, @statusMessage, @createdAt, @createdAt, @ttlMs, @expiresAt,
          @inputSince, @pollIntervalMs, @owner, @queuedAt, @retrySafe, @idempotencyKey, @requestHash, @clientCapabilities, @origin, @progressToken, @traceContext)
        ON CONFLICT DO NOTHING`),
      // A run that ended before its row was written (NewTask.endedBy): the row is written finished, result and all.
      insertEnded: db.prepare(`INSERT INTO tasks (task_id, principal, tool, args, status, status_message, created_at, updated_at,
          ttl_ms, expires_at, input_since, poll_interval_ms, owner, queued_at, retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, trace_context,
          result, error)
        VALUES (@taskId, @principal, @tool, @args, @status, @statusMessage, @createdAt, @updatedAt, @ttlMs, @expiresAt,
          @inputSince, @pollIntervalMs, @owner, @queuedAt, @retrySafe, @idempotencyKey, @requestHash, @clientCapabilities, @origin, @progressToken, @traceContext,
          @result, @error)
        ON CONFLICT DO NOTHING`),
      byIdem: db.prepare(`SELECT ${TASK_COLUMNS} FROM tasks WHERE principal = ? AND tool = ? AND idem_key = ?`),
      get: db.prepare(`SELECT ${TASK_COLUMNS} FROM tasks WHERE task_id = ?`),
      view: db.prepare(`SELECT ${VIEW_COLUMNS} FROM tasks WHERE task_id = ?`),
      savepoint: db.prepare('SAVEPOINT outlast_write'),
      release: db.prepare('RELEASE outlast_write'),
      rollbackTo: db.prepare('ROLLBACK TO outlast_write'),
      tomb: db.prepare('SELECT principal, expired_at FROM tombstones WHERE task_id = ?'),
      progress: db.prepare(`UPDATE tasks SET status_message = ?, poll_interval_ms = COALESCE(?, poll_interval_ms),
          updated_at = ?, version = version + 1 WHERE task_id = ? AND owner IS ? AND epoch = COALESCE(?, epoch) AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`),
      retrySafe: db.prepare(`UPDATE tasks SET retry_safe = ?, version = version + 1 WHERE task_id = ? AND owner IS ? AND epoch = COALESCE(?, epoch) AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`),
      setInput: db.prepare(`UPDATE tasks SET status = ?, input_requests = ?, input_responses = ?, input_since = ?,
          ttl_ms = ?, expires_at = ?, queued_at = ?, updated_at = ?, version = version + 1 WHERE task_id = ? AND version = ? RETURNING ${TASK_COLUMNS}`),
      cancel: db.prepare(`UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?), version = version + 1
          WHERE task_id = ? AND ${UNFINISHED}`),
      finish: db.prepare(`UPDATE tasks SET status = @status, result = @result, error = @error,
          status_message = COALESCE(@statusMessage, status_message), input_requests = '{}', input_since = NULL, queued_at = NULL, parked_at = NULL,
          ttl_ms = @ttlMs, expires_at = @expiresAt, updated_at = @now, version = version + 1
        WHERE task_id = @taskId AND version = @version RETURNING ${TASK_COLUMNS}`),
      pendingCancels: db.prepare(`SELECT task_id FROM tasks WHERE owner = ? AND cancel_requested_at IS NOT NULL AND ${UNFINISHED}`),
      replicaUpsert: db.prepare(`INSERT INTO replicas (replica_id, host, pid, started_at, heartbeat_at) VALUES (?, ?, ?, ?, ?)
        ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`),
      heartbeat: db.prepare('UPDATE replicas SET heartbeat_at = ? WHERE replica_id = ?'),
      replicaDelete: db.prepare('DELETE FROM replicas WHERE replica_id = ?'),
      replicas: db.prepare('SELECT replica_id, host, pid, started_at, heartbeat_at FROM replicas'),
      // A queued task has no owner and is nobody's orphan: it waits for a claim.
      orphans: db.prepare(`SELECT ${TASK_COLUMNS} FROM tasks WHERE ${UNFINISHED} AND queued_at IS NULL
        AND (owner IS NULL OR owner NOT IN (SELECT value FROM json_each(?))) LIMIT ?`),
      takeOver: db.prepare(`UPDATE tasks SET owner = ?, attempts = attempts + 1, epoch = epoch + 1, updated_at = ?, version = version + 1
        WHERE task_id = ? AND owner IS ? AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`),
      retrieved: db.prepare(`UPDATE tasks SET retrieved_at = ? WHERE task_id = ? AND retrieved_at IS NULL
        AND status IN ('completed','failed','cancelled')`),
      expired: db.prepare(`SELECT task_id, principal, status, owner, tool, retrieved_at, queued_at, parked_at FROM tasks
        WHERE expires_at IS NOT NULL AND expires_at <= ? AND status <> 'input_required' LIMIT ?`),
      deleteTask: db.prepare('DELETE FROM tasks WHERE task_id = ?'),
      insertTomb: db.prepare(`INSERT OR REPLACE INTO tombstones (task_id, principal, expired_at, purge_at) VALUES (?, ?, ?, ?)`),
      purge: db.prepare('DELETE FROM tombstones WHERE task_id IN (SELECT task_id FROM tombstones WHERE purge_at <= ? LIMIT ?)'),
      countTasks: db.prepare('SELECT count(*) AS n FROM tasks'),
      countTombs: db.prepare('SELECT count(*) AS n FROM tombstones'),
    };
  }

  async close(): Promise<void> {
    if (!this.db) return;
    this.flush();
    this.db.close();
    this.db = undefined as never;
  }

  private ensureOpen(): void {
    if (!this.db) throw new Error('SqliteTaskStore is not open: call init() first (or it was closed)');
  }

  /**
   * Queues a write. Every write queued in one event-loop turn runs in one IMMEDIATE transaction (each inside
   * its own savepoint, or as one statement, so one refused write does not undo the others); callers are answered
   * after COMMIT. A `oneStatement` write alone in its turn is that statement, committed by itself.
   */
  private write<T>(op: () => T, oneStatement = false): Promise<T> {
    this.ensureOpen();
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ op, oneStatement, resolve: resolve as (v: never) => void, reject });
      if (!this.options.groupCommit) return this.flush();
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    const batch = this.queue;
    if (batch.length === 0 || !this.db) return;
    this.queue = [];
    if (batch.length === 1) {
      // Alone in its transaction: a refused write rolls back the whole of it, no savepoint needed.
      const p = batch[0]!;
      let value: unknown;
      try {
        // A write statement takes the write lock before it reads (as BEGIN IMMEDIATE does) and commits alone.
        value = p.oneStatement ? p.op() : this.runOne.immediate(p.op);
      } catch (error) {
        return p.reject(error);
      }
      return p.resolve(value as never);
    }
    const outcomes: Array<{ ok: boolean; value: unknown }> = new Array(batch.length);
    try {
      this.runBatch.immediate(batch, outcomes);
    } catch (error) {
      for (const p of batch) p.reject(error);
      return;
    }
    batch.forEach((p, i) => {
      const o = outcomes[i]!;
      if (o.ok) p.resolve(o.value as never);
      else p.reject(o.value);
    });
  }

  create(task: NewTask): Promise<{ record: TaskRecord; created: boolean }> {
    return this.write(() => {
      const t = task;
      const key = t.idempotencyKey ?? null;
      if (key !== null) {
        const existing = this.s.byIdem.get(t.principal, t.tool, key) as Row | undefined;
        if (existing) {
          if (existing.request_hash !== (t.requestHash ?? null)) throw new IdempotencyConflictError(key, existing.task_id);
          return { record: toRecord(existing), created: false };
        }
      }
      const ended = t.queued ? undefined : t.endedBy?.();
      const record = ended ? endedRecord(t, ended) : newRecord(t);
      const row = {
        taskId: t.taskId,
        principal: t.principal,
        tool: t.tool,
        args: JSON.stringify(record.args),
        status: record.status,
        statusMessage: record.statusMessage,
        createdAt: record.createdAt,
        ttlMs: record.ttlMs,
        expiresAt: record.expiresAt,
        inputSince: record.inputSince,
        pollIntervalMs: record.pollIntervalMs,
        owner: record.owner,
        queuedAt: record.queuedAt,
        retrySafe: record.retrySafe ? 1 : 0,
        idempotencyKey: key,
        requestHash: record.requestHash,
        clientCapabilities: JSON.stringify(record.clientCapabilities),
        origin: record.origin,
        progressToken: record.progressToken === null ? null : JSON.stringify(record.progressToken),
        traceContext: record.traceContext ? JSON.stringify(record.traceContext) : null,
      };
      const o = ended?.outcome;
      const inserted = o
        ? this.s.insertEnded.run({
            ...row,
            updatedAt: record.updatedAt,
            result: o.status === 'completed' ? (o.resultJson ?? JSON.stringify(o.result)) : null,
            error: o.status === 'failed' ? JSON.stringify(o.error) : null,
          })
        : this.s.insert.run(row);
      if (inserted.changes === 0) throw new Error(`Task id ${t.taskId} already exists`);
      // What was sent plus the column defaults, as PostgreSQL answers: no read-back, no parse of the JSON just written.
      return { record, created: true };
    });
  }

  async get(taskId: string): Promise<TaskLookup> {
    this.ensureOpen();
    const row = this.s.get.get(taskId) as Row | undefined;
    if (row) return this.unlessExpired(row) ?? { state: 'found', record: toRecord(row) };
    return this.tombstone(taskId);
  }

  async view(taskId: string): Promise<TaskLookup<TaskView>> {
    this.ensureOpen();
    const row = this.s.view.get(taskId) as Row | undefined;
    if (row) return this.unlessExpired(row) ?? { state: 'found', record: toView(row) };
    return this.tombstone(taskId);
  }

  /** A row past its TTL reads expired at once, swept or not (one file, one clock: the machine's). */
  private unlessExpired(row: Row): { state: 'expired'; principal: string; expiredAt: number } | undefined {
    if (!readsExpired({ status: row.status, expiresAt: row.expires_at }, Date.now())) return undefined;
    return { state: 'expired', principal: row.principal, expiredAt: row.expires_at! };
  }

  private tombstone(taskId: string): { state: 'expired'; principal: string; expiredAt: number } | { state: 'missing' } {
    const t = this.s.tomb.get(taskId) as { principal: string; expired_at: number } | undefined;
    if (t) return { state: 'expired', principal: t.principal, expiredAt: t.expired_at };
    return { state: 'missing' };
  }

  /** Why an update matched no row. */
  private refusal(taskId: string, owner?: string | null, epoch?: number): TaskWriteRefused {
    const row = this.s.get.get(taskId) as Row | undefined;
    return refusalOf(taskId, row && { status: row.status, owner: row.owner, epoch: row.epoch }, owner, epoch);
  }

  async markRetrieved(taskId: string, now: number): Promise<void> {
    await this.write(() => this.s.retrieved.run(now, taskId));
  }

  setProgress(taskId: string, owner: string, statusMessage: string | null, pollIntervalMs?: number, epoch?: number): Promise<TaskRecord> {
    return this.write(() => {
      const row = this.s.progress.get(statusMessage, pollIntervalMs ?? null, Date.now(), taskId, owner, epoch ?? null) as Row | undefined;
      if (!row) throw this.refusal(taskId, owner, epoch);
      return toRecord(row);
    });
  }

  setRetrySafe(taskId: string, owner: string, retrySafe: boolean, epoch?: number): Promise<TaskRecord> {
    return this.write(() => {
      const row = this.s.retrySafe.get(retrySafe ? 1 : 0, taskId, owner, epoch ?? null) as Row | undefined;
      if (!row) throw this.refusal(taskId, owner, epoch);
      return toRecord(row);
    });
  }

  requestInput(taskId: string, owner: string, requests: Record<string, PendingInput>, now: number, epoch?: number): Promise<TaskRecord> {
    return this.write(() => {
      const row = this.s.get.get(taskId) as Row | undefined;
      if (!row || row.owner !== owner || (epoch !== undefined && row.epoch !== epoch) || isTerminal(row.status)) throw this.refusal(taskId, owner, epoch);
      const rec = toRecord(row);
      return toRecord(this.writeInput(rec, askInput(rec, requests, now), now));
    });
  }

  expireInput(taskId: string, now: number): Promise<TaskRecord | undefined> {
    return this.write(() => {
      const row = this.s.get.get(taskId) as Row | undefined;
      if (!row) return undefined;
      const rec = toRecord(row);
      const { change } = expireInputs(rec, now);
      return change ? toRecord(this.writeInput(rec, change, now)) : rec;
    });
  }

  answerInput(taskId: string, responses: Record<string, JsonObject>, now: number): Promise<{ record: TaskRecord; accepted: string[] }> {
    return this.write(() => {
      const row = this.s.get.get(taskId) as Row | undefined;
      if (!row) throw new TaskWriteRefused(taskId, 'missing');
      const rec = toRecord(row);
      const { accepted, change } = answerInput(rec, responses, now);
      if (!change) return { record: rec, accepted };
      return { record: toRecord(this.writeInput(rec, change, now)), accepted };
    });
  }

  private writeInput(rec: TaskRecord, c: InputChange, now: number): Row {
    return this.s.setInput.get(c.status, JSON.stringify(c.inputRequests), JSON.stringify(c.inputResponses), c.inputSince, c.ttlMs, c.expiresAt,
      c.queuedAt, now, rec.taskId, rec.version) as Row;
  }

  requestCancel(taskId: string, now: number): Promise<TaskRecord | undefined> {
    return this.write(() => {
      this.s.cancel.run(now, taskId);
      const row = this.s.get.get(taskId) as Row | undefined;
      return row ? toRecord(row) : undefined;
    });
  }

  async pendingCancels(owner: string): Promise<string[]> {
    this.ensureOpen();
    return (this.s.pendingCancels.all(owner) as Array<{ task_id: string }>).map((r) => r.task_id);
  }

  finish(taskId: string, owner: string | null, outcome: Outcome, statusMessage: string | null, now: number, epoch?: number): Promise<TaskRecord> {
    return this.write(() => {
      const row = this.s.get.get(taskId) as Row | undefined;
      if (!row) throw new TaskWriteRefused(taskId, 'missing');
      if (isTerminal(row.status)) throw new TaskWriteRefused(taskId, 'terminal');
      if (owner !== null && row.owner !== owner) throw new TaskWriteRefused(taskId, 'fenced');
      if (epoch !== undefined && row.epoch !== epoch) throw new TaskWriteRefused(taskId, 'fenced');
      const { ttlMs, expiresAt } = ttlAfterWait({ createdAt: row.created_at, ttlMs: row.ttl_ms, expiresAt: row.expires_at, inputSince: row.input_since }, now);
      return toRecord(this.s.finish.get({
        taskId,
        version: row.version,
        status: outcome.status,
        result: outcome.status === 'completed' ? (outcome.resultJson ?? JSON.stringify(outcome.result)) : null,
        error: outcome.status === 'failed' ? JSON.stringify(outcome.error) : null,
        statusMessage,
        ttlMs,
        expiresAt,
        now,
      }) as Row);
    });
  }

  async registerReplica(info: ReplicaInfo): Promise<void> {
    this.ensureOpen();
    this.s.replicaUpsert.run(info.replicaId, info.host, info.pid, info.startedAt, info.heartbeatAt);
  }
  async heartbeat(replicaId: string, now: number): Promise<boolean> {
    this.ensureOpen();
    return this.s.heartbeat.run(now, replicaId).changes > 0;
  }
  async removeReplica(replicaId: string): Promise<void> {
    this.ensureOpen();
    this.s.replicaDelete.run(replicaId);
  }
  /** Readiness: the file is open and answers (one read of its schema version, not a count of the tasks). */
  async ping(): Promise<void> {
    this.ensureOpen();
    this.db.pragma('schema_version');
  }
  async listReplicas(): Promise<ReplicaInfo[]> {
    this.ensureOpen();
    return (this.s.replicas.all() as Array<{ replica_id: string; host: string; pid: number; started_at: number; heartbeat_at: number }>).map(
      (r) => ({ replicaId: r.replica_id, host: r.host, pid: r.pid, startedAt: r.started_at, heartbeatAt: r.heartbeat_at }),
    );
  }

  async listOrphans(liveOwners: string[], limit: number): Promise<TaskRecord[]> {
    this.ensureOpen();
    return (this.s.orphans.all(JSON.stringify(liveOwners), limit) as Row[]).map(toRecord);
  }

  takeOver(taskId: string, fromOwner: string | null, newOwner: string, now: number): Promise<TaskRecord> {
    return this.write(() => {
      const row = this.s.takeOver.get(newOwner, now, taskId, fromOwner) as Row | undefined;
      if (!row) throw this.refusal(taskId, fromOwner);
      return toRecord(row);
    });
  }

  async sweep(now: number, tombstoneRetentionMs: number, limit: number): Promise<SweepResult> {
    this.ensureOpen();
    return this.db.transaction(() => {
      const rows = this.s.expired.all(now, limit) as Array<{
        task_id: string; principal: string; status: TaskStatus; owner: string | null; tool: string; retrieved_at: number | null; queued_at: number | null; parked_at: number | null;
      }>;
      for (const r of rows) {
        this.s.deleteTask.run(r.task_id);
        this.steps.deleteOf(r.task_id);
        this.s.insertTomb.run(r.task_id, r.principal, now, now + tombstoneRetentionMs);
      }
      const purged = this.s.purge.run(now, limit).changes;
      return {
        expired: rows.map((r) => ({
          taskId: r.task_id, status: r.status, owner: r.owner, tool: r.tool, retrieved: r.retrieved_at !== null,
          queued: r.queued_at !== null && r.parked_at === null, parked: r.parked_at !== null,
        })),
        purged,
      };
    }).immediate();
  }

  async principalLoad(principal: string): Promise<PrincipalLoad> {
    this.ensureOpen();
    const r = this.queueQ.principalLoad.get(principal) as { queued: number; stored: number; next_expiry: number | null };
    return { queued: r.queued, stored: r.stored, nextExpiry: r.next_expiry };
  }

  async queueDepth(): Promise<number> {
    this.ensureOpen();
    return (this.queueQ.depth.get() as { n: number }).n;
  }

  async queuePosition(taskId: string): Promise<number | undefined> {
    this.ensureOpen();
    return this.positions.get(taskId);
  }

  claimQueued(claim: QueueClaim): Promise<TaskRecord[]> {
    return this.write(() => claimRows<Row>(this.queueQ.claim, claim).map(toRecord));
  }

  async claimedAt(owner: string, now: number): Promise<TaskRecord[]> {
    this.ensureOpen();
    return (this.queueQ.claimedAt.all({ owner, now }) as Row[]).map(toRecord);
  }

  cancelQueued(taskId: string, now: number, statusMessage: string): Promise<TaskRecord | undefined> {
    return this.write(() => {
      const row = this.queueQ.cancel.get({ taskId, now, statusMessage }) as Row | undefined;
      return row ? toRecord(row) : undefined;
    });
  }

  async nextWake(now: number): Promise<number | undefined> {
    this.ensureOpen();
    return (this.parking.nextWake.get(now) as { t: number | null }).t ?? undefined;
  }

  park(taskId: string, fence: WriteFence, wait: ParkRequest, now: number): Promise<ParkResult> {
    return this.write(() => {
      const row = this.s.get.get(taskId) as Row | undefined;
      if (!row) throw new TaskWriteRefused(taskId, 'missing');
      const rec = toRecord(row);
      const p = parkChange(rec, fence, wait, now);
      if (p.outcome !== 'parked') return { outcome: p.outcome, record: rec };
      const parked = this.parking.park.get({ taskId, version: rec.version, parkedAt: p.change.parkedAt, queuedAt: p.change.queuedAt }) as Row;
      return { outcome: 'parked' as const, record: toRecord(parked) };
    });
  }

  async listSteps(taskId: string): Promise<StepRecord[]> {
    this.ensureOpen();
    return this.steps.list(taskId);
  }

  writeStep(taskId: string, fence: WriteFence, step: StepWrite): Promise<void> {
    return this.write(() => this.steps.write(taskId, fence, step), true);
  }

  markAsked(taskId: string, key: string, asker: string, now: number): Promise<boolean> {
    return this.write(() => this.asks.mark.run({ taskId, key, asker, now }).changes > 0, true);
  }

  unmarkAsked(taskId: string, key: string, asker: string): Promise<boolean> {
    return this.write(() => this.asks.unmark.run(taskId, key, asker).changes > 0, true);
  }

  async sharedSecret(name: string, generate: () => string): Promise<string> {
    this.ensureOpen();
    return this.secret(name, generate);
  }

  async count(): Promise<{ tasks: number; tombstones: number }> {
    this.ensureOpen();
    return {
      tasks: (this.s.countTasks.get() as { n: number }).n,
      tombstones: (this.s.countTombs.get() as { n: number }).n,
    };
  }

  async listByPrincipal(principal: string, after: ListCursor | undefined, limit: number): Promise<TaskSummary[]> {
    this.ensureOpen();
    return this.listing.byPrincipal(principal, after, limit);
  }
}

/** Parses `sqlite:PATH` (or a bare path). */
export function sqliteStoreFromUrl(url: string, options?: SqliteStoreOptions): SqliteTaskStore {
  const path = url.startsWith('sqlite:') ? url.slice('sqlite:'.length) : url;
  if (!path) throw new Error(`Invalid store "${url}": expected sqlite:PATH, e.g. sqlite:.outlast/tasks.db`);
  return new SqliteTaskStore(path, options);
}
