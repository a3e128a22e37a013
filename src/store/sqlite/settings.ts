/** Deployment-wide settings on SQLite: secrets generated once by whichever process asks first. */
import type Database from 'better-sqlite3';

export function prepareSettings(db: Database.Database): (name: string, generate: () => string) => string {
  const insert = db.prepare('INSERT INTO settings (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING');
  const read = db.prepare('SELECT value FROM settings WHERE name = ?');
  /** The stored value of `name`, or `generate()` stored first (one IMMEDIATE transaction: processes on the file agree). */
  return (name: string, generate: () => string): string =>
    db.transaction(() => {
      insert.run(name, generate(), Date.now());
      return (read.get(name) as { value: string }).value;
    }).immediate();
}
