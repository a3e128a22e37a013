/**
 * Which builds may serve a schema (CONTRIBUTING.md, "Migrations"; docs/deployment.md, "Schema changes and
 * rollbacks"). A migration only adds for one release (expand); what it replaced is removed a release later
 * (contract), and a migration that removes or changes what older builds use says so: `compatibleFrom`, the oldest
 * schema version a build may know and still serve once it is applied. The schema keeps that number beside each
 * applied migration (`compatible_from` of the migrations table), so a build that never heard of the migration knows.
 */

export interface Migration {
  version: number;
  sql: string;
  /** A contract migration: builds that know only versions below this one must not serve a schema it was applied to. */
  compatibleFrom?: number;
}

/** The migrations table's column that keeps each migration's `compatibleFrom`, added by every build that checks it. */
export const COMPATIBLE_FROM_COLUMN = 'compatible_from';

/** The newest migration a build knows. */
export function newestVersion(migrations: ReadonlyArray<Migration>): number {
  return migrations.reduce((n, m) => Math.max(n, m.version), 0);
}

/** The schema as its migrations table records it: its newest version, and the oldest version a build must know. */
export interface AppliedSchema {
  newest: number;
  compatibleFrom: number | null;
}

/** The schema from its migrations table's rows. */
export function appliedSchema(rows: ReadonlyArray<{ version: number; compatible_from: number | null }>): AppliedSchema {
  let newest = 0;
  let compatibleFrom: number | null = null;
  for (const r of rows) {
    newest = Math.max(newest, r.version);
    if (r.compatible_from !== null) compatibleFrom = Math.max(compatibleFrom ?? 0, r.compatible_from);
  }
  return { newest, compatibleFrom };
}

/** A build too old for the schema it was started on: nothing was written. */
export class SchemaTooNewError extends Error {
  constructor(readonly what: string, readonly known: number, readonly applied: AppliedSchema) {
    super(`${what} is at schema version ${applied.newest}, which needs a build that knows version ${applied.compatibleFrom} or later ` +
      `(a migration removed what older builds use); this build knows versions up to ${known}: start a newer build`);
    this.name = 'SchemaTooNewError';
  }
}

/**
 * What a build that knows versions up to `known` does on `applied`: throws SchemaTooNewError when it must not serve;
 * returns the line to log when the schema is newer but keeps older builds working (a rollback), else undefined.
 */
export function schemaVerdict(what: string, known: number, applied: AppliedSchema): string | undefined {
  if (applied.compatibleFrom !== null && applied.compatibleFrom > known) throw new SchemaTooNewError(what, known, applied);
  if (applied.newest <= known) return undefined;
  return `${what} is at schema version ${applied.newest}, newer than this build (versions up to ${known}): serving, as its newer ` +
    'migrations keep older builds working; upgrade this replica to the build that migrated it';
}

/** The first migration the additive rule binds (those before it were written before the rule; see CONTRIBUTING.md). */
export const ADDITIVE_RULE_FROM = 15;

/**
 * The statements of a migration's SQL that remove or change what an older build's statements use (so the build of
 * the release before would fail on a schema this was applied to): dropping a table, column, function, view, type,
 * or an index (SQLite statements name indexes) or a trigger that the migration does not create again (by the same name), renaming anything,
 * changing a column's type, making a column NOT NULL, or adding a NOT NULL column without a default (an older
 * build's INSERT would fail). A migration with any of these is a contract step: it must say `compatibleFrom`.
 */
export function contractStatements(sql: string): string[] {
  // Function bodies ($$ … $$) are code, not schema changes; comments are not statements.
  const text = sql.replace(/\$(\w*)\$[\s\S]*?\$\1\$/g, '$$').replace(/--[^\n]*/g, '');
  const recreated = new Set([...text.matchAll(/\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(?:TRIGGER|INDEX)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)/gi)].map((m) => m[1]!.toLowerCase()));
  const found: string[] = [];
  for (const raw of text.split(';')) {
    const st = raw.replace(/\s+/g, ' ').trim();
    if (!st) continue;
    const dropped = /\bDROP (?:TRIGGER|INDEX) (?:IF EXISTS )?(\w+)/i.exec(st);
    const addsNotNull = [...st.matchAll(/\bADD (?:COLUMN )?(?:IF NOT EXISTS )?\w+ [^,]*/gi)].some((m) => /\bNOT NULL\b/i.test(m[0]) && !/\bDEFAULT\b/i.test(m[0]));
    if (
      /\bDROP (?:TABLE|COLUMN|FUNCTION|PROCEDURE|VIEW|TYPE|SCHEMA|SEQUENCE)\b/i.test(st) ||
      (/\bALTER TABLE\b[^]*\bDROP (?!CONSTRAINT\b|TRIGGER\b|DEFAULT\b|NOT NULL\b)\w+/i.test(st)) ||
      /\bRENAME\b/i.test(st) ||
      /\bALTER (?:COLUMN )?\w+ (?:SET DATA )?TYPE\b/i.test(st) ||
      /\bSET NOT NULL\b/i.test(st) ||
      addsNotNull ||
      (dropped && !recreated.has(dropped[1]!.toLowerCase()))
    ) {
      found.push(st.length > 160 ? `${st.slice(0, 157)}...` : st);
    }
  }
  return found;
}
