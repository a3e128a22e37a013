// test:quick: starts no process and no browser (npm run test:quick).
/**
 * The migration rule (CONTRIBUTING.md, "Migrations"): a migration only adds, so replicas of the release before keep
 * serving through a rolling upgrade; what it replaces is removed a release later by a contract migration, which says
 * which builds may still serve (`compatibleFrom`, checked at start: src/store/schema-version.ts). Read from the
 * migration lists of both backends.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MIGRATIONS as PG } from '../src/store/postgres/schema.js';
import { MIGRATIONS as SQLITE } from '../src/store/sqlite/schema.js';
import { ADDITIVE_RULE_FROM, contractStatements, type Migration } from '../src/store/schema-version.js';

/** Why each migration of `list` breaks the rule ('' when it keeps it). */
function breaches(backend: string, list: ReadonlyArray<Migration>): string[] {
  const out: string[] = [];
  for (const m of list) {
    if (m.version < ADDITIVE_RULE_FROM) continue;
    const found = contractStatements(m.sql);
    if (m.compatibleFrom !== undefined) {
      if (!Number.isInteger(m.compatibleFrom) || m.compatibleFrom < 1 || m.compatibleFrom > m.version) out.push(`${backend} migration ${m.version}: compatibleFrom must be a version from 1 to ${m.version}`);
      continue;
    }
    if (found.length) {
      out.push(`${backend} migration ${m.version} is not additive (${found.join(' | ')}): add what is new now and remove what it replaces a release ` +
        'later, in a migration that says compatibleFrom (CONTRIBUTING.md, "Migrations")');
    }
  }
  return out;
}

describe('migrations are additive for one release (expand, then contract a release later)', () => {
  it('every migration of both backends from the rule on only adds, or says which builds may serve it', () => {
    assert.deepEqual([...breaches('PostgreSQL', PG), ...breaches('SQLite', SQLITE)], []);
    const versions = (l: ReadonlyArray<Migration>) => l.map((m) => m.version);
    for (const l of [PG, SQLITE]) assert.deepEqual(versions(l), [...versions(l)].sort((a, b) => a - b), 'numbered in order, each once');
    for (const l of [PG, SQLITE]) assert.equal(new Set(versions(l)).size, l.length);
  });

  it('the check refuses a newest migration that drops, renames or retypes, naming the statement and what to do', () => {
    const newest = Math.max(...PG.map((m) => m.version), ADDITIVE_RULE_FROM - 1);
    const bad = (sql: string): Migration => ({ version: newest + 1, sql });
    const cases = [
      'ALTER TABLE tasks DROP COLUMN retrieved_at',
      'ALTER TABLE tasks RENAME COLUMN owner TO runner',
      'ALTER TABLE tasks ALTER COLUMN status_message TYPE varchar(200)',
      'ALTER TABLE tasks ALTER COLUMN status_message SET NOT NULL',
      'ALTER TABLE tasks ADD COLUMN region text NOT NULL',
      'DROP TABLE tombstones',
      'DROP INDEX tasks_ops_waiting',
      'DROP FUNCTION outlast_claim(text, bigint)',
      'DROP TRIGGER tasks_history_changed ON tasks',
    ];
    for (const sql of cases) {
      const [why] = breaches('PostgreSQL', [...PG, bad(`-- a new thing\n${sql};\nCREATE INDEX x ON tasks (tool);`)]);
      assert.ok(why, `refused: ${sql}`);
      assert.ok(why.startsWith(`PostgreSQL migration ${newest + 1} is not additive (${sql}): add what is new now`), why);
    }
    // What only adds passes: a nullable column, a NOT NULL one with a default, tables, indexes, replaced functions,
    // triggers and indexes (dropped and created again by the same name: an older build's INDEXED BY still finds it).
    const fine = `ALTER TABLE tasks ADD COLUMN region text, ADD COLUMN weight integer NOT NULL DEFAULT 1;
CREATE TABLE sessions (id text PRIMARY KEY, data text NOT NULL);
CREATE INDEX sessions_by_data ON sessions (data);
CREATE OR REPLACE FUNCTION outlast_now_ms() RETURNS bigint LANGUAGE sql AS $$ SELECT 1; DROP TABLE nothing $$;
DROP TRIGGER IF EXISTS tasks_history_changed ON tasks;
CREATE TRIGGER tasks_history_changed AFTER UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION outlast_history_changed();
DROP INDEX tasks_ops_waiting;
CREATE INDEX tasks_ops_waiting ON tasks (input_since);`;
    assert.deepEqual(breaches('PostgreSQL', [...PG, bad(fine)]), []);
    // A contract migration says which builds may serve it, and passes.
    assert.deepEqual(breaches('PostgreSQL', [...PG, { ...bad('ALTER TABLE tasks DROP COLUMN retrieved_at'), compatibleFrom: newest }]), []);
  });

  it('it would have caught the one migration before the rule that stopped older builds (8: the claim function of the old signature dropped)', () => {
    const eight = PG.find((m) => m.version === 8)!;
    assert.deepEqual(contractStatements(eight.sql), ['DROP FUNCTION IF EXISTS outlast_claim(text, bigint, text[], integer[], text[], integer[], integer)']);
    assert.deepEqual(contractStatements(PG.find((m) => m.version === 7)!.sql), [], 'a trigger replaced within its migration is not a removal');
  });
});
