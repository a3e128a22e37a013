/**
 * PostgreSQL task store on `pg`: any replica answers anything. Every write is one autocommit statement (PostgreSQL
 * group-commits concurrent transactions itself; creations and durable-step writes of one event-loop turn share one
 * statement); read-modify-write steps (input) are optimistic on `version`.
 * Signals travel through a SignalBus: by default PgSignalBus on this store's connection (LISTEN/NOTIFY outside the
 * write transactions, coalesced); through a transaction-mode pooler, one named by `--bus` (../bus-url.ts). Nothing
 * lives in a session (design 19): ./schema-names.ts, ./statements.ts.
 */
import pg from 'pg';
import { isTerminal, type JsonObject, type TaskOrigin, type TaskStatus } from '../../protocol/index.js';
import { answerInput, askInput, expireInputs, parkChange, readsExpired, refusalOf, type InputChange } from '../rules.js';
import {
  IdempotencyConflictError,
  TaskValueRefused,
  TaskWriteRefused,
  type NewTask,
  type Outcome,
  type PendingInput,
  type ListCursor,
  type ParkRequest,
  type ParkResult,
  type PrincipalLoad,
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
  StoreUnavailableError,
} from '../types.js';
import { DEFAULT_PG_TIMEOUTS, checkTimeouts, isUnreachable, sqlStateOf, takeTimeoutParams, withTimeouts, type PgTimeouts } from './timeouts.js';
import { LISTING_QUERIES } from './listing.js';
import { toSummary, type SummaryRow } from '../summary.js';
import { TASK_COLUMNS, VIEW_COLUMNS } from '../task-columns.js';
import { newRecord } from '../new-record.js';
import { PgSignalBus, describeConnection, quoteIdent } from './bus.js';
import { StoreClock } from './clock.js';
import { QUEUE_QUERIES, claimValues } from './queue.js';
import { MIGRATIONS } from './schema.js';
import { COMPATIBLE_FROM_COLUMN, appliedSchema, newestVersion, schemaVerdict } from '../schema-version.js';
import { SETTINGS_QUERIES } from './settings.js';
import { ASK_QUERIES } from './asks.js';
import { PARKING_QUERIES } from './parking.js';
import { StepWriteGroups } from './step-batch.js';
import { STEPS_QUERIES } from './steps.js';
import { stepValues, toStep, type StepRow } from '../step-row.js';
import { applyHistorySetting, postgresOps } from './ops.js';
import { postgresEvents } from './events.js';
import { CommitClaims, claimingFinish } from './commit-claim.js';
import { postgresOutputEvents, startOutputCursor } from './output-events.js';
import { postgresOperatorSessions } from './operator-sessions.js';
import type { OperatorSessionStore } from '../operator-sessions.js';
import type { OutputEventStore } from '../output-events.js';
import { postgresOutput } from './output.js';
import type { OutputStore } from '../output.js';
import type { EventStore } from '../events.js';
import type { OperatorStore } from '../types.js';
import { QualifiedStatements, beginInSchema, pinFunctionsSql, qualify, unpinnedFunctionsSql } from './schema-names.js';
import { KeptPool } from './kept-pool.js';
import { DatabaseAnswers, PREPARED_MODES, poolerRefusal, reachesServerDirectly, runStatement, runTransaction, type PreparedMode } from './statements.js';

export { PgSignalBus } from './bus.js';
export { DEFAULT_PG_TIMEOUTS, type PgTimeouts } from './timeouts.js';

export interface PostgresStoreOptions {
  /** Connection settings for node-postgres (a connection string or fields). */
  connection: pg.ClientConfig;
  /** Schema holding the tables (created if missing). Default `outlast`. Deployments sharing a database use one each. */
  schema?: string;
  /** Connections in the pool. Default 10. */
  poolSize?: number;
  /** Record each task's transitions (the dashboard's history; default true). A setting of the schema, applied at
   *  start-up: the last replica to start decides. */
  history?: boolean;
  /** Deadlines on every connection (./timeouts.ts; defaults DEFAULT_PG_TIMEOUTS). */
  timeouts?: Partial<PgTimeouts>;
  /** Named prepared statements: `on`, `off` (through a pooler that does not keep them), or `auto` (default: on only
   *  when the connection reaches PostgreSQL itself; ./statements.ts). */
  preparedStatements?: PreparedMode;
}

/** Node-postgres returns bigint as strings; every bigint here is epoch ms or a duration, well inside 2^53. */
const TYPES = {
  getTypeParser: ((oid: number, format?: string) =>
    oid === 20 ? (v: string) => Number(v) : (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format)) as pg.CustomTypesConfig['getTypeParser'],
};

interface Row {
  task_id: string;
  principal: string;
  tool: string;
  args: JsonObject;
  status: TaskStatus;
  status_message: string | null;
  created_at: number;
  updated_at: number;
  ttl_ms: number | null;
  expires_at: number | null;
  input_since: number | null;
  poll_interval_ms: number;
  result: JsonObject | null;
  error: TaskRecord['error'];
  input_requests: TaskRecord['inputRequests'];
  input_responses: TaskRecord['inputResponses'];
  cancel_requested_at: number | null;
  owner: string | null;
  queued_at: number | null;
  epoch: number;
  parked_at: number | null;
  attempts: number;
  retry_safe: boolean;
  idem_key: string | null;
  request_hash: string | null;
  client_capabilities: JsonObject;
  origin: TaskOrigin;
  progress_token: string | number | null;
  version: number;
  retrieved_at: number | null;
  /** The database's clock when the row was read (public reads only): expiry is decided by the store's time. */
  store_now?: number;
  trace_context: TaskRecord['traceContext'];
  output_seq: number;
}

interface PendingCreate {
  t: NewTask;
  resolve: (r: { record: TaskRecord; created: boolean }) => void;
  reject: (e: unknown) => void;
}

/** Most rows in one group-committed INSERT. */
const MAX_BATCH = 500;


/** The database's clock, epoch ms: every replica reading a task's expiry reads the same time. */
const STORE_NOW = '(extract(epoch FROM now()) * 1000)::float8 AS store_now';
const UNFINISHED = `status IN ('working','input_required')`;

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
    result: r.result,
    error: r.error,
    inputRequests: r.input_requests,
    retrievedAt: r.retrieved_at,
    version: r.version,
    queuedAt: r.queued_at,
    parkedAt: r.parked_at,
    outputSeq: r.output_seq,
  };
}

function toRecord(r: Row): TaskRecord {
  return {
    ...toView(r),
    tool: r.tool,
    args: r.args,
    expiresAt: r.expires_at,
    inputSince: r.input_since,
    inputResponses: r.input_responses,
    cancelRequestedAt: r.cancel_requested_at,
    owner: r.owner,
    epoch: r.epoch,
    wakeAt: r.parked_at === null ? null : r.queued_at,
    attempts: r.attempts,
    retrySafe: r.retry_safe,
    idempotencyKey: r.idem_key,
    requestHash: r.request_hash,
    clientCapabilities: r.client_capabilities,
    origin: r.origin,
    progressToken: r.progress_token,
    traceContext: r.trace_context,
    outputSeq: r.output_seq,
  };
}

/** The JSON escape of U+0000 (an odd number of backslashes before u0000; an escaped backslash followed by "u0000" is text). */
const NUL_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\u0000/;

const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/;

/** A task's terminal state, written by the replica that runs it. The TTL grows by the time spent waiting for input
 *  (same rule as rules.ttlAfterWait, in SQL: one statement). */
const FINISH = `UPDATE tasks SET status = $3, result = $4, error = $5, status_message = COALESCE($6, status_message),
      input_requests = '{}', input_since = NULL, queued_at = NULL, parked_at = NULL,
      ttl_ms = CASE WHEN input_since IS NULL OR ttl_ms IS NULL THEN ttl_ms ELSE ttl_ms + GREATEST(0, $7 - input_since) END,
      expires_at = CASE WHEN input_since IS NULL OR ttl_ms IS NULL THEN expires_at ELSE created_at + ttl_ms + GREATEST(0, $7 - input_since) END,
      updated_at = $7, version = version + 1
    WHERE task_id = $1 AND ($2::text IS NULL OR owner = $2) AND epoch = COALESCE($8::int, epoch) AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`;

/** SQLSTATE of a duplicate key. */
const UNIQUE_VIOLATION = '23505';

/** The columns a creation writes, in the order of its 20 values (created_at given twice: it is updated_at too). */
const NEW_TASK_COLUMNS = `task_id, principal, tool, args, status, status_message, created_at, updated_at, ttl_ms, expires_at,
      input_since, poll_interval_ms, owner, retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, queued_at, trace_context`;

// Statements (named where the connection keeps them, so each connection prepares them once; ./statements.ts).
const Q = {
  // One statement for any number of rows (one array per column), so it is prepared once per connection.
  insertMany: `INSERT INTO tasks (${NEW_TASK_COLUMNS})
    SELECT task_id, principal, tool, args, status, status_message, created_at, created_at, ttl_ms, expires_at,
      input_since, poll_interval_ms, owner, retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, queued_at, trace_context
    FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::bigint[],
      $10::bigint[], $11::int[], $12::text[], $13::boolean[], $14::text[], $15::text[], $16::jsonb[], $17::text[], $18::jsonb[], $19::bigint[], $20::jsonb[])
      AS r(task_id, principal, tool, args, status, status_message, created_at, ttl_ms, expires_at, input_since, poll_interval_ms,
        owner, retry_safe, idem_key, request_hash, client_capabilities, origin, progress_token, queued_at, trace_context)
    ON CONFLICT DO NOTHING RETURNING task_id`,
  // A creation alone in its turn (the usual one at low load): the same row from plain parameters, 60 µs less than the
  // arrays' unnest (bench/README.md).
  insertOne: `INSERT INTO tasks (${NEW_TASK_COLUMNS})
    VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7::bigint, $7::bigint, $8::bigint, $9::bigint, $10::bigint, $11::int, $12, $13::boolean, $14, $15,
      $16::jsonb, $17, $18::jsonb, $19::bigint, $20::jsonb)
    ON CONFLICT DO NOTHING RETURNING task_id`,
  byIdem: `SELECT ${TASK_COLUMNS} FROM tasks WHERE principal = $1 AND tool = $2 AND idem_key = $3`,
  get: `SELECT ${TASK_COLUMNS} FROM tasks WHERE task_id = $1`,
  read: `SELECT ${TASK_COLUMNS}, ${STORE_NOW} FROM tasks WHERE task_id = $1`,
  view: `SELECT ${VIEW_COLUMNS}, ${STORE_NOW} FROM tasks WHERE task_id = $1`,
  tomb: 'SELECT principal, expired_at FROM tombstones WHERE task_id = $1',
  retrieved: `UPDATE tasks SET retrieved_at = $2 WHERE task_id = $1 AND retrieved_at IS NULL AND status IN ('completed','failed','cancelled')`,
  progress: `UPDATE tasks SET status_message = $3, poll_interval_ms = COALESCE($4, poll_interval_ms), updated_at = $5, version = version + 1
    WHERE task_id = $1 AND owner = $2 AND epoch = COALESCE($6::int, epoch) AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`,
  retrySafe: `UPDATE tasks SET retry_safe = $3, version = version + 1 WHERE task_id = $1 AND owner = $2 AND epoch = COALESCE($4::int, epoch) AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`,
  setInput: `UPDATE tasks SET status = $3, input_requests = $4, input_responses = $5, input_since = $6, ttl_ms = $7, expires_at = $8,
      queued_at = $10, updated_at = $9, version = version + 1
    WHERE task_id = $1 AND version = $2 RETURNING ${TASK_COLUMNS}`,
  cancel: `UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, $2), version = version + 1
    WHERE task_id = $1 AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`,
  pendingCancels: `SELECT task_id FROM tasks WHERE owner = $1 AND cancel_requested_at IS NOT NULL AND ${UNFINISHED}`,
  finish: FINISH,
  // The same, logging its change with the deliveries claimed for this replica (./commit-claim.ts).
  finishClaiming: claimingFinish(FINISH),
  // Replica times are kept on the database's clock: the caller's `now` is applied as an offset from its own clock.
  replicaUpsert: `INSERT INTO replicas (replica_id, host, pid, started_at, heartbeat_at)
      VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5::float8 / 1000))
    ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`,
  heartbeat: `UPDATE replicas SET heartbeat_at = now() + make_interval(secs => $2::float8 / 1000) WHERE replica_id = $1`,
  replicas: `SELECT replica_id, host, pid, started_at, (extract(epoch FROM now() - heartbeat_at) * 1000)::float8 AS age_ms FROM replicas`,
  replicaDelete: 'DELETE FROM replicas WHERE replica_id = $1',
  ping: 'SELECT 1',
  // A queued task has no owner and is nobody's orphan: it waits for a claim.
  orphans: `SELECT ${TASK_COLUMNS} FROM tasks WHERE ${UNFINISHED} AND queued_at IS NULL AND (owner IS NULL OR owner <> ALL($1::text[])) LIMIT $2`,
  takeOver: `UPDATE tasks SET owner = $3, attempts = attempts + 1, epoch = epoch + 1, updated_at = $4, version = version + 1
    WHERE task_id = $1 AND owner IS NOT DISTINCT FROM $2 AND ${UNFINISHED} RETURNING ${TASK_COLUMNS}`,
  // Several replicas sweep at once: SKIP LOCKED hands each expired row to exactly one of them.
  sweep: `WITH victims AS (
      SELECT task_id FROM tasks WHERE expires_at IS NOT NULL AND expires_at <= $1 AND status <> 'input_required'
      ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED
    ), gone AS (
      DELETE FROM tasks t USING victims v WHERE t.task_id = v.task_id
      RETURNING t.task_id, t.principal, t.status, t.owner, t.tool, t.retrieved_at, t.queued_at, t.parked_at
    ), steps AS (
      DELETE FROM task_steps s USING gone g WHERE s.task_id = g.task_id
    ), tomb AS (
      INSERT INTO tombstones (task_id, principal, expired_at, purge_at) SELECT task_id, principal, $1, $1 + $2 FROM gone
      ON CONFLICT (task_id) DO UPDATE SET expired_at = excluded.expired_at, purge_at = excluded.purge_at
    )
    SELECT task_id, principal, status, owner, tool, retrieved_at, queued_at, parked_at FROM gone`,
  purge: `DELETE FROM tombstones WHERE task_id IN (
      SELECT task_id FROM tombstones WHERE purge_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
  count: 'SELECT (SELECT count(*) FROM tasks)::int AS tasks, (SELECT count(*) FROM tombstones)::int AS tombstones',
  ...LISTING_QUERIES,
  ...QUEUE_QUERIES,
  ...SETTINGS_QUERIES,
  ...ASK_QUERIES,
  ...PARKING_QUERIES,
  ...STEPS_QUERIES,
};

type QueryName = keyof typeof Q;

export class PostgresTaskStore implements TaskStore {
  readonly backend = 'postgres';
  readonly schema: string;
  private readonly connection: pg.ClientConfig;
  private readonly poolSize: number;
  private readonly history: boolean;
  private pool: KeptPool | undefined;
  /** The heartbeat lane: replica rows and pings on connections of their own, so a backlog of task queries never
   *  makes a live replica miss its heartbeat. */
  private control: KeptPool | undefined;
  /** The heartbeats' own connections: a probe, a listing or a heartbeat still hanging from an outage (each bounded by
   *  the connect deadline) never holds the slot the first heartbeat after the outage needs; at most three heartbeats
   *  are in flight (./recovery.ts), and one more slot is spare. */
  private beats: KeptPool | undefined;
  readonly timeouts: PgTimeouts;
  /** The operator side (dashboard, alerts); see ./ops.ts. */
  readonly ops: OperatorStore;
  /** MCP Events: subscriptions, the change log, deliveries; see ./events.ts. */
  readonly events: EventStore;
  /** Webhook delivery of task output: per-subscription cursors; see ./output-events.ts. */
  readonly outputEvents: OutputEventStore;
  /** Dashboard sign-ins; see ./operator-sessions.ts. */
  readonly operatorSessions: OperatorSessionStore;
  /** Task output; see ./output.ts. */
  readonly output: OutputStore;
  private opening: Promise<void> | undefined;
  /** A delivering replica's claims written with its tasks' terminal states (./commit-claim.ts). */
  private readonly commitClaims = new CommitClaims();
  /** The database's clock (one clock decides: every time this store is given comes from it). */
  private clock: StoreClock | undefined;
  /** The statements with their tables named in the schema (no session search_path; ./schema-names.ts). */
  private readonly sql: Record<QueryName, string>;
  private readonly qualified: QualifiedStatements;
  readonly preparedMode: PreparedMode;
  /** Whether named prepared statements are used (decided at open from preparedMode). */
  prepared = false;
  /** When the database last answered: a statement past its deadline is cancelled only on a database that answers. */
  private readonly answers: DatabaseAnswers;
  /** Set at open when the schema is newer than this build and keeps it working (a rollback): the line to log. */
  schemaAhead: string | undefined;

  constructor(options: PostgresStoreOptions) {
    this.schema = options.schema ?? 'outlast';
    if (!SCHEMA_NAME.test(this.schema)) {
      throw new Error(`Invalid schema name "${this.schema}": use letters, digits and underscores (at most 63, not starting with a digit)`);
    }
    this.connection = options.connection;
    this.poolSize = options.poolSize ?? 10;
    this.history = options.history ?? true;
    this.timeouts = { ...DEFAULT_PG_TIMEOUTS, ...options.timeouts };
    checkTimeouts(this.timeouts);
    this.preparedMode = options.preparedStatements ?? 'auto';
    if (!PREPARED_MODES.includes(this.preparedMode)) throw new Error(`Invalid prepared_statements "${this.preparedMode}": use on, off or auto`);
    const schema = this.schema;
    this.sql = Object.fromEntries(Object.entries(Q).map(([k, v]) => [k, qualify(v, schema)])) as Record<QueryName, string>;
    this.qualified = new QualifiedStatements(schema);
    const notOpen = () => new Error('PostgresTaskStore is not open: call init() first (or it was closed)');
    // On the heartbeat lane: a pool full of slow statements must not hold back the probe that lets them be cancelled.
    this.answers = new DatabaseAnswers(() => {
      const lane = this.control ?? this.pool;
      return lane ? runStatement(lane, { text: 'SELECT 1' }, 0) : Promise.reject(notOpen());
    });
    const query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> => {
      if (!this.pool) return Promise.reject(notOpen());
      const sql = this.qualified.of(text);
      return runStatement<R>(this.pool, this.prepared ? { name, text: sql, values } : { text: sql, values }, this.timeouts.statementTimeoutMs, this.answers);
    };
    this.ops = postgresOps(query, (taskId) => this.get(taskId));
    this.output = postgresOutput(query);
    this.outputEvents = postgresOutputEvents(query);
    this.operatorSessions = postgresOperatorSessions(query);
    const events = postgresEvents(
      query,
      (fn) => (this.pool ? runTransaction(this.pool, schema, this.timeouts.statementTimeoutMs, fn) : Promise.reject(notOpen())),
      startOutputCursor,
      (row) => (unlessExpired(row as Row) ? null : toRecord(row as Row)),
    );
    this.events = { ...events, claimOnCommit: (c) => this.commitClaims.register(c) };
  }

  /** Connection settings of the pool and the signal bus: nothing set on the session (a pooler would refuse or
   *  forget it): the schema is named in every statement, the statement deadline is kept by ./statements.ts. */
  clientConfig(): pg.ClientConfig {
    return withTimeouts({ ...this.connection, types: TYPES }, this.timeouts);
  }

  /** The LISTEN/NOTIFY channel of this deployment (one per schema). */
  get channel(): string {
    return `outlast_${this.schema}`;
  }

  createSignalBus(options: { onError?: (message: string) => void } = {}): PgSignalBus {
    return new PgSignalBus({ connection: this.clientConfig(), channel: this.channel, pingMs: this.timeouts.signalPingMs, ...options });
  }

  init(): Promise<void> {
    this.opening ??= this.open().catch((e) => {
      this.opening = undefined;
      throw e;
    });
    return this.opening;
  }

  private async open(): Promise<void> {
    const pool = new pg.Pool({ ...this.clientConfig(), max: this.poolSize });
    // An idle connection dropped by the server (restart, failover) must not crash the process; the pool
    // replaces it on the next query.
    pool.on('error', () => undefined);
    const client = await pool.connect().catch(async (e: Error) => {
      await pool.end().catch(() => undefined);
      const pooler = poolerRefusal(e.message);
      throw new Error(`Cannot connect to PostgreSQL (${describeConnection(this.connection)}): ${pooler ?? e.message}`);
    });
    try {
      this.prepared = this.preparedMode === 'on' || (this.preparedMode === 'auto' && (await reachesServerDirectly(client)));
      // The schema for the migrations, and no deadline (a migration may take longer than a task statement may).
      await client.query(beginInSchema(this.schema, 0));
      // One migrator at a time across replicas (the lock key is the schema's name).
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`outlast:${this.schema}`]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(this.schema)}`);
      await client.query('CREATE TABLE IF NOT EXISTS outlast_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)');
      await client.query(`ALTER TABLE outlast_migrations ADD COLUMN IF NOT EXISTS ${COMPATIBLE_FROM_COLUMN} integer`);
      const rows = (await client.query<{ version: number; compatible_from: number | null }>(`SELECT version, ${COMPATIBLE_FROM_COLUMN} FROM outlast_migrations`)).rows;
      // Refused before anything is written when a newer build's migration removed what this build uses.
      this.schemaAhead = schemaVerdict(`the store (PostgreSQL schema "${this.schema}")`, newestVersion(MIGRATIONS), appliedSchema(rows));
      const applied = new Set(rows.map((r) => r.version));
      for (const m of MIGRATIONS) {
        if (applied.has(m.version)) continue;
        await client.query(m.sql);
        await client.query(`INSERT INTO outlast_migrations (version, applied_at, ${COMPATIBLE_FROM_COLUMN}) VALUES ($1, $2, $3)`, [m.version, Date.now(), m.compatibleFrom ?? null]);
      }
      await applyHistorySetting(client, this.history);
      // Trigger and claim functions find their tables whichever session runs them.
      await client.query(pinFunctionsSql(this.schema));
      await client.query('COMMIT');
    } catch (e) {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release();
      await pool.end().catch(() => undefined);
      throw e;
    }
    client.release();
    const kept = new KeptPool(pool);
    const clock = new StoreClock(kept);
    await clock.start();
    this.clock = clock;
    this.pool = kept;
    // A heartbeat is a one-row update: it gets as long as a connect, not as long as a task query.
    const lane = () => {
      const p = new pg.Pool({ ...withTimeouts(this.clientConfig(), this.timeouts, this.timeouts.connectTimeoutMs), max: 4 });
      p.on('error', () => undefined);
      return new KeptPool(p);
    };
    this.control = lane();
    this.beats = lane();
  }

  /**
   * What the store relies on, checked through whatever sits between it and PostgreSQL (design 19: never silent): its
   * tables are in the schema and every function there finds them (a pooler keeps no search_path), and a statement
   * past the deadline is cancelled (the cancel request reaches the server). Throws saying what to do.
   */
  async selfCheck(): Promise<void> {
    const pool = this.pool;
    if (!pool) throw new Error('PostgresTaskStore is not open: call init() first (or it was closed)');
    const r = (await runStatement<{ tasks: boolean; unpinned: number }>(pool, {
      text: `SELECT to_regclass($2) IS NOT NULL AS tasks, (${unpinnedFunctionsSql()}) AS unpinned`,
      values: [this.schema, `${quoteIdent(this.schema)}.tasks`],
    }, 0)).rows[0]!;
    if (!r.tasks || r.unpinned > 0) {
      throw new Error(`the store cannot keep its schema "${this.schema}" on ${describeConnection(this.connection)}: ` +
        `${r.tasks ? `${r.unpinned} of its functions do not name it` : 'its tables are not there'} after the migrations (a migration replaced them without the schema): start the replica again, it pins them at start`);
    }
    if (this.timeouts.statementTimeoutMs > 0) {
      // A cancel that reaches the backend before the statement starts is ignored (the backend is idle), so on a loaded
      // machine one early probe can miss: the check fails only when a cancel sent well after the start misses too.
      let missed = '';
      for (const probeMs of [50, 250, 1000]) {
        const t0 = Date.now();
        const err = await runStatement(pool, { text: 'SELECT pg_sleep(2)' }, probeMs, this.answers).then(() => undefined, (e: unknown) => e as Error & { code?: string });
        if (err?.code === '57014') return;
        missed = `a cancel request sent after ${probeMs} ms did not stop a statement (${err ? err.message : `it ran for ${Date.now() - t0} ms`})`;
        if (err) break;
      }
      throw new Error(`the store cannot keep its statement deadline (statement_timeout_ms=${this.timeouts.statementTimeoutMs}) on ${describeConnection(this.connection)}: ` +
        `${missed}. A pooler must forward cancel requests (PgBouncer does); or set statement_timeout_ms=0 in the store URL to run without server-side deadlines`);
    }
  }

  /** Epoch ms on PostgreSQL's clock (an offset measured against clock_timestamp(), kept fresh). */
  now(): number {
    return this.clock ? this.clock.now() : Date.now();
  }

  async close(): Promise<void> {
    this.clock?.stop();
    const pool = this.pool;
    const lanes = [this.control, this.beats];
    this.pool = undefined;
    this.control = undefined;
    this.beats = undefined;
    this.opening = undefined;
    await Promise.all(lanes.map((lane) => lane?.end().catch(() => undefined)));
    if (pool) await pool.end();
  }

  private async q<R extends pg.QueryResultRow = Row>(name: QueryName, values: unknown[], lane: KeptPool | undefined = this.pool): Promise<pg.QueryResult<R>> {
    if (!lane) throw new Error('PostgresTaskStore is not open: call init() first (or it was closed)');
    try {
      const text = this.sql[name];
      return await runStatement<R>(lane, this.prepared ? { name: `outlast_${name}`, text, values } : { text, values }, this.timeouts.statementTimeoutMs, this.answers);
    } catch (e) {
      if (isUnreachable(e)) throw new StoreUnavailableError(`${(e as Error).message} (PostgreSQL ${describeConnection(this.connection)})`, { cause: e });
      // A text or JSON value holding U+0000, which PostgreSQL cannot store: the caller's value, refused as such (never
      // "retry", never the database's words).
      const code = (e as { code?: unknown }).code;
      if (code === '22021' || code === '22P05') throw new TaskValueRefused(typeof values[0] === 'string' ? values[0] : '(new)', 'PostgreSQL cannot store the character U+0000 (NUL) in a text or JSON value');
      throw e;
    }
  }

  private async row(name: QueryName, values: unknown[]): Promise<Row | undefined> {
    return (await this.q(name, values)).rows[0];
  }

  private async refusal(taskId: string, owner?: string | null, epoch?: number): Promise<TaskWriteRefused> {
    const row = await this.row('get', [taskId]);
    return refusalOf(taskId, row && { status: row.status, owner: row.owner, epoch: row.epoch, cancelRequestedAt: row.cancel_requested_at }, owner, epoch);
  }

  /**
   * Durably creates a task. Creations that arrive in the same event-loop turn are group-committed: one INSERT of
   * all their rows (one commit), and each caller is answered only after it. A row the INSERT skipped (its
   * idempotency key, or its id, exists) is then resolved on its own.
   */
  create(t: NewTask): Promise<{ record: TaskRecord; created: boolean }> {
    if (!this.pool) return Promise.reject(new Error('PostgresTaskStore is not open: call init() first (or it was closed)'));
    return new Promise((resolve, reject) => {
      this.creates.push({ t, resolve, reject });
      if (!this.createsScheduled) {
        this.createsScheduled = true;
        setImmediate(() => this.flushCreates());
      }
    });
  }

  private creates: PendingCreate[] = [];
  private createsScheduled = false;

  private flushCreates(): void {
    this.createsScheduled = false;
    while (this.creates.length > 0) void this.insertBatch(this.creates.splice(0, MAX_BATCH));
  }

  private async insertBatch(batch: PendingCreate[]): Promise<void> {
    // The rows as they will be written; each is also the record its caller gets once the INSERT commits.
    const records = batch.map((p) => newRecord(p.t));
    const rows = records.map((r) => [
      r.taskId, r.principal, r.tool, JSON.stringify(r.args), r.status, r.statusMessage, r.createdAt, r.ttlMs, r.expiresAt,
      r.inputSince, r.pollIntervalMs, r.owner, r.retrySafe, r.idempotencyKey, r.requestHash, JSON.stringify(r.clientCapabilities),
      r.origin, r.progressToken === null ? null : JSON.stringify(r.progressToken), r.queuedAt, r.traceContext === null ? null : JSON.stringify(r.traceContext),
    ]);
    let inserted: Set<string>;
    try {
      // Alone, the row's values as they are; together, one array per column.
      const answer = rows.length === 1 ? this.q<{ task_id: string }>('insertOne', rows[0]!) : this.q<{ task_id: string }>('insertMany', rows[0]!.map((_, c) => rows.map((row) => row[c])));
      inserted = new Set((await answer).rows.map((r) => r.task_id));
    } catch (e) {
      if (batch.length === 1) return batch[0]!.reject(e);
      // The store did not answer: every row's fate is the same unknown (retrying them one by one would wait again).
      if (e instanceof StoreUnavailableError) return batch.forEach((p) => p.reject(e));
      // One bad row must not fail the others: each on its own.
      for (const p of batch) void this.insertBatch([p]);
      return;
    }
    batch.forEach((p, i) => {
      if (inserted.has(p.t.taskId)) p.resolve({ record: records[i]!, created: true });
      else this.existing(p.t).then(p.resolve, p.reject);
    });
  }

  /** A creation the INSERT skipped: the task its idempotency key already names, or an error. */
  private async existing(t: NewTask): Promise<{ record: TaskRecord; created: boolean }> {
    const key = t.idempotencyKey ?? null;
    if (key !== null) {
      const existing = await this.row('byIdem', [t.principal, t.tool, key]);
      if (existing) {
        if (existing.request_hash !== (t.requestHash ?? null)) throw new IdempotencyConflictError(key, existing.task_id);
        return { record: toRecord(existing), created: false };
      }
    }
    throw new Error(`Task id ${t.taskId} already exists`);
  }

  async get(taskId: string): Promise<TaskLookup> {
    const row = await this.row('read', [taskId]);
    if (!row) return this.tombstone(taskId);
    return unlessExpired(row) ?? { state: 'found', record: toRecord(row) };
  }

  async view(taskId: string): Promise<TaskLookup<TaskView>> {
    const row = await this.row('view', [taskId]);
    if (!row) return this.tombstone(taskId);
    return unlessExpired(row) ?? { state: 'found', record: toView(row) };
  }

  private async tombstone(taskId: string): Promise<TaskLookup<never>> {
    const t = (await this.q<{ principal: string; expired_at: number }>('tomb', [taskId])).rows[0];
    return t ? { state: 'expired', principal: t.principal, expiredAt: t.expired_at } : { state: 'missing' };
  }

  async markRetrieved(taskId: string, now: number): Promise<void> {
    await this.q('retrieved', [taskId, now]);
  }

  async setProgress(taskId: string, owner: string, statusMessage: string | null, pollIntervalMs?: number, epoch?: number): Promise<TaskRecord> {
    const row = await this.row('progress', [taskId, owner, statusMessage, pollIntervalMs ?? null, this.now(), epoch ?? null]);
    if (!row) throw await this.refusal(taskId, owner, epoch);
    return toRecord(row);
  }

  async setRetrySafe(taskId: string, owner: string, retrySafe: boolean, epoch?: number): Promise<TaskRecord> {
    const row = await this.row('retrySafe', [taskId, owner, retrySafe, epoch ?? null]);
    if (!row) throw await this.refusal(taskId, owner, epoch);
    return toRecord(row);
  }

  /** Read, apply, write back if nobody wrote in between (else read again). */
  private async readModifyWrite<T>(taskId: string, step: (rec: TaskRecord) => { change?: InputChange; out: (rec: TaskRecord) => T }, now: number): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const row = await this.row('get', [taskId]);
      if (!row) throw new TaskWriteRefused(taskId, 'missing');
      const rec = toRecord(row);
      const { change, out } = step(rec);
      if (!change) return out(rec);
      const c = change;
      const written = await this.row('setInput', [
        taskId, rec.version, c.status, JSON.stringify(c.inputRequests), JSON.stringify(c.inputResponses), c.inputSince, c.ttlMs, c.expiresAt, now, c.queuedAt,
      ]);
      if (written) return out(toRecord(written));
      if (attempt >= 50) throw new Error(`Task ${taskId} is being written too often to update its input; retry`);
    }
  }

  requestInput(taskId: string, owner: string, requests: Record<string, PendingInput>, now: number, epoch?: number): Promise<TaskRecord> {
    return this.readModifyWrite(taskId, (rec) => {
      if (rec.owner !== owner || (epoch !== undefined && rec.epoch !== epoch) || isTerminal(rec.status)) throw refusalOf(taskId, rec, owner, epoch);
      return { change: askInput(rec, requests, now), out: (r) => r };
    }, now);
  }

  async expireInput(taskId: string, now: number): Promise<TaskRecord | undefined> {
    try {
      return await this.readModifyWrite(taskId, (rec) => ({ change: expireInputs(rec, now).change, out: (r) => r }), now);
    } catch (e) {
      if (e instanceof TaskWriteRefused && e.reason === 'missing') return undefined;
      throw e;
    }
  }

  answerInput(taskId: string, responses: Record<string, JsonObject>, now: number): Promise<{ record: TaskRecord; accepted: string[] }> {
    return this.readModifyWrite(taskId, (rec) => {
      const { accepted, change } = answerInput(rec, responses, now);
      return change ? { change, out: (record) => ({ record, accepted }) } : { out: (record) => ({ record, accepted }) };
    }, now);
  }

  async requestCancel(taskId: string, now: number): Promise<TaskRecord | undefined> {
    const row = (await this.row('cancel', [taskId, now])) ?? (await this.row('get', [taskId]));
    return row ? toRecord(row) : undefined;
  }

  async pendingCancels(owner: string): Promise<string[]> {
    return (await this.q<{ task_id: string }>('pendingCancels', [owner])).rows.map((r) => r.task_id);
  }

  async finish(taskId: string, owner: string | null, outcome: Outcome, statusMessage: string | null, now: number, epoch?: number): Promise<TaskRecord> {
    const result = outcome.status === 'completed' ? (outcome.resultJson ?? JSON.stringify(outcome.result)) : null;
    const error = outcome.status === 'failed' ? JSON.stringify(outcome.error) : null;
    // jsonb cannot hold U+0000: refused as a value (nothing written), not retried as if the database were down.
    if ((result !== null && NUL_ESCAPE.test(result)) || (error !== null && NUL_ESCAPE.test(error))) {
      throw new TaskValueRefused(taskId, 'PostgreSQL cannot store the character U+0000 in a JSON value');
    }
    const values = [taskId, owner, outcome.status, result, error, statusMessage, now, epoch ?? null];
    const claim = this.commitClaims.begin(now);
    let row: (Row & { event_claims?: unknown }) | undefined;
    let record: TaskRecord | undefined;
    try {
      row = claim ? await this.row('finishClaiming', [...values, ...claim.values]) : await this.row('finish', values);
      record = row && toRecord(row);
    } finally {
      // Its deliveries go out now, before the caller hears of the commit (none when nothing was written).
      if (claim) this.commitClaims.end(claim, row, record);
    }
    if (!record) throw await this.refusal(taskId, owner ?? undefined, epoch);
    return record;
  }

  async registerReplica(info: ReplicaInfo): Promise<void> {
    await this.q('replicaUpsert', [info.replicaId, info.host, info.pid, info.startedAt, info.heartbeatAt - Date.now()], this.control);
  }

  async heartbeat(replicaId: string, now: number): Promise<boolean> {
    return ((await this.q('heartbeat', [replicaId, now - Date.now()], this.beats)).rowCount ?? 0) > 0;
  }

  async removeReplica(replicaId: string): Promise<void> {
    await this.q('replicaDelete', [replicaId], this.control);
  }

  async ping(): Promise<void> {
    await this.q('ping', [], this.control);
  }

  async listReplicas(): Promise<ReplicaInfo[]> {
    const rows = (await this.q<{ replica_id: string; host: string; pid: number; started_at: number; age_ms: number }>('replicas', [], this.control)).rows;
    const now = Date.now();
    return rows.map((r) => ({
      replicaId: r.replica_id, host: r.host, pid: r.pid, startedAt: r.started_at, heartbeatAt: Math.round(now - r.age_ms), heartbeatAgeMs: Math.max(0, r.age_ms),
    }));
  }

  async listOrphans(liveOwners: string[], limit: number): Promise<TaskRecord[]> {
    return (await this.q('orphans', [liveOwners, limit])).rows.map(toRecord);
  }

  async takeOver(taskId: string, fromOwner: string | null, newOwner: string, now: number): Promise<TaskRecord> {
    const row = await this.row('takeOver', [taskId, fromOwner, newOwner, now]);
    if (!row) throw await this.refusal(taskId, fromOwner);
    return toRecord(row);
  }

  async sweep(now: number, tombstoneRetentionMs: number, limit: number): Promise<SweepResult> {
    const gone = (await this.q<{
      task_id: string; principal: string; status: TaskStatus; owner: string | null; tool: string; retrieved_at: number | null; queued_at: number | null; parked_at: number | null;
    }>('sweep', [now, tombstoneRetentionMs, limit])).rows;
    const purged = (await this.q('purge', [now, limit])).rowCount ?? 0;
    return {
      expired: gone.map((r) => ({
        taskId: r.task_id, status: r.status, owner: r.owner, tool: r.tool, retrieved: r.retrieved_at !== null,
        queued: r.queued_at !== null && r.parked_at === null, parked: r.parked_at !== null,
      })),
      purged,
    };
  }

  async principalLoad(principal: string): Promise<PrincipalLoad> {
    const r = (await this.q<{ queued: number; stored: number; next_expiry: number | null }>('principalLoad', [principal])).rows[0]!;
    return { queued: r.queued, stored: r.stored, nextExpiry: r.next_expiry };
  }

  async queueDepth(): Promise<number> {
    return (await this.q<{ n: number }>('queueDepth', [])).rows[0]!.n;
  }

  async queuePosition(taskId: string): Promise<number | undefined> {
    return (await this.q<{ n: number }>('queuePosition', [taskId])).rows[0]?.n;
  }

  async claimQueued(claim: QueueClaim): Promise<TaskRecord[]> {
    return (await this.q('claim', claimValues(claim))).rows.map(toRecord);
  }

  async claimedAt(owner: string, now: number): Promise<TaskRecord[]> {
    return (await this.q('claimedAt', [owner, now])).rows.map(toRecord);
  }

  async cancelQueued(taskId: string, now: number, statusMessage: string): Promise<TaskRecord | undefined> {
    const row = await this.row('cancelQueued', [taskId, now, statusMessage]);
    return row ? toRecord(row) : undefined;
  }

  async nextWake(now: number): Promise<number | undefined> {
    return (await this.q<{ t: number | null }>('nextWake', [now])).rows[0]?.t ?? undefined;
  }

  async park(taskId: string, fence: WriteFence, wait: ParkRequest, now: number): Promise<ParkResult> {
    for (let attempt = 0; ; attempt++) {
      const row = await this.row('get', [taskId]);
      if (!row) throw new TaskWriteRefused(taskId, 'missing');
      const rec = toRecord(row);
      const p = parkChange(rec, fence, wait, now);
      if (p.outcome !== 'parked') return { outcome: p.outcome, record: rec };
      const parked = await this.row('park', [taskId, rec.version, p.change.parkedAt, p.change.queuedAt]);
      if (parked) return { outcome: 'parked', record: toRecord(parked) };
      if (attempt >= 50) throw new Error(`Task ${taskId} is being written too often to park it; retry`);
    }
  }

  async listSteps(taskId: string): Promise<StepRecord[]> {
    return (await this.q<StepRow>('listSteps', [taskId])).rows.map(toStep);
  }

  /** Step writes of one event-loop turn are group-committed (./step-batch.ts). */
  writeStep(taskId: string, fence: WriteFence, step: StepWrite): Promise<void> {
    if (!this.pool) return Promise.reject(new Error('PostgresTaskStore is not open: call init() first (or it was closed)'));
    return this.stepWrites.write(taskId, fence, step);
  }

  private readonly stepWrites = new StepWriteGroups({
    one: async (taskId, fence, step) => {
      const values = [taskId, fence.owner, fence.epoch, ...stepValues(step)];
      // A key's first write skips ON CONFLICT's look for a row (its speculative insertion costs about 10 µs of a
      // statement); the row there anyway (a write whose answer was lost, carried over) makes it the upsert.
      const r = step.firstWrite ? await this.q('insertStep', values).catch((e: unknown) => (sqlStateOf(e) === UNIQUE_VIOLATION ? this.q('writeStep', values) : Promise.reject(e))) : await this.q('writeStep', values);
      if ((r.rowCount ?? 0) === 0) throw await this.refusal(taskId, fence.owner, fence.epoch);
    },
    many: async (cols) => (await this.q<{ task_id: string; step_key: string }>('writeSteps', cols)).rows,
    refusal: (taskId, fence) => this.refusal(taskId, fence.owner, fence.epoch),
  });

  async markAsked(taskId: string, key: string, asker: string, now: number): Promise<boolean> {
    return ((await this.q('askMark', [taskId, key, asker, now])).rowCount ?? 0) > 0;
  }

  async unmarkAsked(taskId: string, key: string, asker: string): Promise<boolean> {
    return ((await this.q('askUnmark', [taskId, key, asker])).rowCount ?? 0) > 0;
  }

  async sharedSecret(name: string, generate: () => string): Promise<string> {
    await this.q('settingInsert', [name, generate(), this.now()]);
    return (await this.q<{ value: string }>('settingRead', [name])).rows[0]!.value;
  }

  async count(): Promise<{ tasks: number; tombstones: number }> {
    return (await this.q<{ tasks: number; tombstones: number }>('count', [])).rows[0]!;
  }

  async listByPrincipal(principal: string, after: ListCursor | undefined, limit: number): Promise<TaskSummary[]> {
    const rows = after
      ? (await this.q<SummaryRow>('listByPrincipalAfter', [principal, after.createdAt, after.taskId, limit])).rows
      : (await this.q<SummaryRow>('listByPrincipal', [principal, limit])).rows;
    return rows.map(toSummary);
  }
}

/** A row past its TTL reads expired at once, swept or not, on the database's clock. */
function unlessExpired(row: Row): { state: 'expired'; principal: string; expiredAt: number } | undefined {
  if (!readsExpired({ status: row.status, expiresAt: row.expires_at }, row.store_now ?? Date.now())) return undefined;
  return { state: 'expired', principal: row.principal, expiredAt: row.expires_at! };
}

/**
 * Parses `postgres://USER@HOST:PORT/DB?schema=NAME&pool=N` (also `postgresql://`). `schema` (default `outlast`),
 * `pool` (default 10), `prepared_statements` (`on`, `off`, default `auto`: ./statements.ts) and the deadlines of ./timeouts.ts (`connect_timeout_ms`, `query_timeout_ms`,
 * `statement_timeout_ms`, `keepalive_ms`, `signal_ping_ms`) are Outlast's; other parameters go to node-postgres.
 */
export function postgresStoreFromUrl(url: string): PostgresTaskStore {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`Invalid store "${url}": expected postgres://USER@HOST:PORT/DATABASE?schema=NAME`);
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') throw new Error(`Invalid store "${url}": not a postgres:// URL`);
  const timeouts = takeTimeoutParams(u, url);
  const schema = u.searchParams.get('schema') ?? undefined;
  const pool = u.searchParams.get('pool');
  const prepared = u.searchParams.get('prepared_statements');
  u.searchParams.delete('schema');
  u.searchParams.delete('pool');
  u.searchParams.delete('prepared_statements');
  if (prepared !== null && !(PREPARED_MODES as readonly string[]).includes(prepared)) {
    throw new Error(`Invalid store "${url}": prepared_statements must be on, off or auto (auto: named statements only on a direct connection)`);
  }
  let poolSize: number | undefined;
  if (pool !== null) {
    poolSize = Number(pool);
    if (!Number.isInteger(poolSize) || poolSize < 1 || poolSize > 1000) throw new Error(`Invalid store "${url}": pool must be an integer from 1 to 1000`);
  }
  return new PostgresTaskStore({
    connection: { connectionString: u.toString() }, timeouts, ...(schema !== undefined ? { schema } : {}), ...(poolSize ? { poolSize } : {}),
    ...(prepared !== null ? { preparedStatements: prepared as PreparedMode } : {}),
  });
}
