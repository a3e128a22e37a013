/**
 * Opens a SQLite file the way every Outlast database is opened (the task store and the client's journal): WAL,
 * synchronous FULL (or NORMAL for durability "process"), a busy timeout, temporary files in memory, foreign keys,
 * then the numbered migrations not yet applied, each in its own IMMEDIATE transaction. The files hold secrets (the
 * store's shared keys, the journal's arguments and results), so they are made for their user alone (private-files.ts).
 */
import Database from 'better-sqlite3';
import { dirname } from 'node:path';
import { COMPATIBLE_FROM_COLUMN, appliedSchema, newestVersion, schemaVerdict, type Migration } from '../schema-version.js';
import { createPrivateFile, makePrivateFolder } from '../private-files.js';

export interface OpenSqliteOptions {
  /** `full` (default): a commit survives power loss. `process`: synchronous=NORMAL, survives a process crash only. */
  durability?: 'full' | 'process';
  busyTimeoutMs?: number;
  migrations: ReadonlyArray<Migration>;
  /** The table that records applied migrations. */
  migrationsTable: string;
  /** What the file is, for error messages ("the journal", "the task store"). */
  what: string;
  /** Told when the file's schema is newer than this build and keeps it working (a rollback): the line to log. */
  schemaAhead?: (line: string) => void;
}

export function openSqlite(path: string, o: OpenSqliteOptions): Database.Database {
  if (path !== ':memory:' && path !== '') {
    try {
      makePrivateFolder(dirname(path), `the folder of ${o.what}`);
    } catch (e) {
      throw new Error(`Cannot create the folder of ${o.what} ${dirname(path)}: ${(e as Error).message}`);
    }
    try {
      // Made 0600 before SQLite opens it: SQLite gives its -wal and -shm files the mode of the main file.
      createPrivateFile(path, `${o.what}`, ' (and its -wal and -shm files)');
    } catch (e) {
      throw new Error(`Cannot create ${o.what} ${path}: ${(e as Error).message}`);
    }
  }
  let db: Database.Database;
  try {
    db = new Database(path);
  } catch (e) {
    throw new Error(`Cannot open ${o.what} ${path}: ${(e as Error).message}`);
  }
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${o.durability === 'process' ? 'NORMAL' : 'FULL'}`);
  db.pragma(`busy_timeout = ${o.busyTimeoutMs ?? 5000}`);
  // A checkpoint copies each page in the WAL once however often it changed: at 4,000 pages (16 MiB) rather than
  // SQLite's 1,000, the pages every creation touches (each index's newest leaf) are copied a quarter as often.
  db.pragma('wal_autocheckpoint = 4000');
  // Statement journals and savepoint journals in memory: a group commit's savepoints and every statement whose
  // triggers write keep the pages they change until they end, and past 64 KiB SQLite spilled them to a temporary
  // file, two pwrite() per page, more than the WAL itself. Recovery never reads them (the WAL is what it replays).
  db.pragma('temp_store = MEMORY');
  db.pragma('foreign_keys = ON');
  db.transaction(() => {
    db.exec(`CREATE TABLE IF NOT EXISTS ${o.migrationsTable} (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`);
    const columns = db.prepare(`SELECT name FROM pragma_table_info('${o.migrationsTable}')`).pluck().all();
    if (!columns.includes(COMPATIBLE_FROM_COLUMN)) db.exec(`ALTER TABLE ${o.migrationsTable} ADD COLUMN ${COMPATIBLE_FROM_COLUMN} INTEGER`);
  }).immediate();
  const rows = db.prepare(`SELECT version, ${COMPATIBLE_FROM_COLUMN} FROM ${o.migrationsTable}`).all() as Array<{ version: number; compatible_from: number | null }>;
  let ahead: string | undefined;
  try {
    // Refused before anything is written when a newer build's migration removed what this build uses.
    ahead = schemaVerdict(`${o.what} ${path}`, newestVersion(o.migrations), appliedSchema(rows));
  } catch (e) {
    db.close();
    throw e;
  }
  if (ahead) o.schemaAhead?.(ahead);
  const applied = db.prepare(`SELECT 1 FROM ${o.migrationsTable} WHERE version = ?`);
  for (const m of o.migrations) {
    // Checked under the write lock: processes opening a new file together apply each migration once.
    db.transaction(() => {
      if (applied.get(m.version)) return;
      db.exec(m.sql);
      db.prepare(`INSERT INTO ${o.migrationsTable} (version, applied_at, ${COMPATIBLE_FROM_COLUMN}) VALUES (?, ?, ?)`).run(m.version, Date.now(), m.compatibleFrom ?? null);
    }).immediate();
  }
  return db;
}
