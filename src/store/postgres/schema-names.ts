/**
 * The store's schema without a session (design 19: a transaction-mode pooler keeps no `search_path`): every
 * statement names its tables and functions in the schema, and every function of the schema carries the schema as
 * its own `search_path` (a property of the function in the catalogue, so trigger bodies resolve their tables
 * whichever session runs them).
 *
 * Why names and not `SET LOCAL search_path` in each transaction: almost every write of the store is one autocommit
 * statement; a transaction around each would cost three more round trips (BEGIN, SET LOCAL, COMMIT) per statement on
 * the direct path too. The names are rewritten once per statement text (cached), so a statement costs what it did.
 * Multi-statement transactions (migrations, events' subscription writes) do set `search_path` locally, in the same
 * round trip as their BEGIN.
 */
import { quoteIdent } from './bus.js';

/** Every table of the store (migrations create them in the schema). */
export const STORE_TABLES = [
  'tasks', 'tombstones', 'replicas', 'settings', 'task_steps', 'task_counts', 'task_events', 'alerts', 'task_subscriptions',
  'event_log', 'event_subscriptions', 'event_deliveries', 'outlast_migrations', 'question_asks', 'task_output', 'event_output_cursors',
  'operator_sessions',
] as const;

const TABLE_REF = new RegExp(`\\b(FROM|JOIN|INTO|UPDATE|USING|TABLE)(\\s+)(${STORE_TABLES.join('|')})\\b`, 'gi');
const FUNCTION_CALL = /(?<![."\w])(outlast_[a-z0-9_]+)\s*\(/g;
const REGCLASS = new RegExp(`'(${STORE_TABLES.join('|')})'::regclass`, 'g');

/** `sql` with its store tables and functions named in `schema` (a statement, not a migration: migrations run under
 *  `SET LOCAL search_path`). */
export function qualify(sql: string, schema: string): string {
  const s = quoteIdent(schema);
  return sql
    .replace(TABLE_REF, (_m, kw: string, ws: string, table: string) => `${kw}${ws}${s}.${table}`)
    .replace(FUNCTION_CALL, (_m, fn: string) => `${s}.${fn}(`)
    .replace(REGCLASS, (_m, table: string) => `'${s.replace(/'/g, "''")}.${table}'::regclass`);
}

/** A cache of qualified statement texts (keyed by the text the caller holds: constants, or a few generated shapes). */
export class QualifiedStatements {
  private readonly cache = new Map<string, string>();
  constructor(private readonly schema: string) {}

  of(sql: string): string {
    let out = this.cache.get(sql);
    if (out === undefined) {
      out = qualify(sql, this.schema);
      if (this.cache.size < 1000) this.cache.set(sql, out);
    }
    return out;
  }
}

/** The first statement of a transaction that names its tables by `search_path` (one round trip with its BEGIN). */
export function beginInSchema(schema: string, statementTimeoutMs: number): string {
  return `BEGIN; SET LOCAL search_path = ${quoteIdent(schema)}; SET LOCAL statement_timeout = ${Math.max(0, Math.floor(statementTimeoutMs))}`;
}

/**
 * Gives every function of the schema the schema as its `search_path` (run at start-up, after the migrations: a
 * migration's `CREATE OR REPLACE FUNCTION` drops the setting). Only functions not already pinned are altered.
 */
export function pinFunctionsSql(schema: string): string {
  const lit = `'${schema.replace(/'/g, "''")}'`;
  return `DO $pin$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = ${lit} AND NOT coalesce(p.proconfig, '{}') @> ARRAY['search_path=' || quote_ident(${lit})]
  LOOP
    EXECUTE format('ALTER FUNCTION %s SET search_path = %I', f, ${lit});
  END LOOP;
END $pin$`;
}

/** Functions of the schema whose `search_path` is not the schema (0 when pinned). */
export function unpinnedFunctionsSql(): string {
  return `SELECT count(*)::int AS n FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = $1 AND NOT coalesce(p.proconfig, '{}') @> ARRAY['search_path=' || quote_ident($1)]`;
}
