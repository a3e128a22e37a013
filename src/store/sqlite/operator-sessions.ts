/** Dashboard sessions on SQLite (see ../operator-sessions.ts); writes go through the store's group-commit queue. */
import type Database from 'better-sqlite3';
import { OPERATOR_SESSIONS_MIGRATION, operatorSessionStatements, operatorSessionsTable, toOperatorSession, type OperatorSessionRow, type OperatorSessionStore } from '../operator-sessions.js';

type Write = <T>(op: () => T) => Promise<T>;

export const SQLITE_OPERATOR_SESSIONS_MIGRATION = { version: OPERATOR_SESSIONS_MIGRATION, sql: operatorSessionsTable({ text: 'TEXT', time: 'INTEGER' }) };

/** The named values of a statement's placeholders @p1, @p2, … */
const at = (...values: unknown[]) => Object.fromEntries(values.map((v, i) => [`p${i + 1}`, v]));

export function sqliteOperatorSessions(db: Database.Database, write: Write): OperatorSessionStore {
  const q = Object.fromEntries(Object.entries(operatorSessionStatements((i) => `@p${i}`)).map(([k, sql]) => [k, db.prepare(sql)])) as Record<keyof ReturnType<typeof operatorSessionStatements>, Database.Statement>;
  return {
    open: (s, keepPerToken) =>
      write(() => {
        q.purgeExpired.run(at(s.createdAt));
        q.insert.run(at(s.id, s.operator, s.tokenDigest, s.createdAt, s.expiresAt));
        q.keepNewest.run(at(s.tokenDigest, keepPerToken));
      }),
    get: async (id) => {
      const r = q.get.get(at(id)) as OperatorSessionRow | undefined;
      return r && toOperatorSession(r);
    },
    touch: (id, now) => write(() => void q.touch.run(at(id, now))),
    end: (id) => write(() => q.end.run(at(id)).changes > 0),
  };
}
