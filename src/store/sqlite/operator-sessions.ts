/** Dashboard sessions on SQLite (see ../operator-sessions.ts); writes go through the store's group-commit queue. */
import type Database from 'better-sqlite3';
import { OPERATOR_SESSIONS_MIGRATION, operatorSessionStatements, operatorSessionsTable, toOperatorSession, type OperatorSessionRow, type OperatorSessionStore } from '../operator-sessions.js';

type Write = <T>(op: () => T) => Promise<T>;

export const SQLITE_OPERATOR_SESSIONS_MIGRATION = { version: OPERATOR_SESSIONS_MIGRATION, sql: operatorSessionsTable({ text: 'TEXT', time: 'INTEGER' }) };

export function sqliteOperatorSessions(db: Database.Database, write: Write): OperatorSessionStore {
  const q = Object.fromEntries(Object.entries(operatorSessionStatements((i) => `?${i}`)).map(([k, sql]) => [k, db.prepare(sql)])) as Record<keyof ReturnType<typeof operatorSessionStatements>, Database.Statement>;
  return {
    open: (s, keepPerToken) =>
      write(() => {
        q.purgeExpired.run(s.createdAt);
        q.insert.run(s.id, s.operator, s.tokenDigest, s.createdAt, s.expiresAt);
        q.keepNewest.run(s.tokenDigest, keepPerToken);
      }),
    get: async (id) => {
      const r = q.get.get(id) as OperatorSessionRow | undefined;
      return r && toOperatorSession(r);
    },
    touch: (id, now) => write(() => void q.touch.run(id, now)),
    end: (id) => write(() => q.end.run(id).changes > 0),
  };
}
