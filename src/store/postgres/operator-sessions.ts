/** Dashboard sessions on PostgreSQL (see ../operator-sessions.ts). */
import type pg from 'pg';
import { OPERATOR_SESSIONS_MIGRATION, operatorSessionStatements, operatorSessionsTable, toOperatorSession, type OperatorSessionRow, type OperatorSessionStore } from '../operator-sessions.js';

type Query = <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]) => Promise<pg.QueryResult<R>>;

export const POSTGRES_OPERATOR_SESSIONS_MIGRATION = { version: OPERATOR_SESSIONS_MIGRATION, sql: operatorSessionsTable({ text: 'text', time: 'bigint' }) };

export function postgresOperatorSessions(query: Query): OperatorSessionStore {
  const q = operatorSessionStatements((i) => `$${i}`);
  return {
    open: async (s, keepPerToken) => {
      // Three statements, no transaction: the row is what counts; the purge and the bound are housekeeping that the
      // next sign-in does again if this one stops between them.
      await query('osess_purge', q.purgeExpired, [s.createdAt]);
      await query('osess_insert', q.insert, [s.id, s.operator, s.tokenDigest, s.createdAt, s.expiresAt]);
      await query('osess_keep', q.keepNewest, [s.tokenDigest, keepPerToken]);
    },
    get: async (id) => {
      const r = await query<OperatorSessionRow>('osess_get', q.get, [id]);
      return r.rows[0] && toOperatorSession(r.rows[0]);
    },
    touch: async (id, now) => void (await query('osess_touch', q.touch, [id, now])),
    end: async (id) => ((await query('osess_end', q.end, [id])).rowCount ?? 0) > 0,
  };
}
