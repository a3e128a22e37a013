/** Deployment-wide settings on PostgreSQL: secrets generated once by whichever replica asks first. */
export const SETTINGS_QUERIES = {
  // Two statements, not one: after ON CONFLICT waited for another replica's insert, only a new statement sees its row.
  settingInsert: 'INSERT INTO settings (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING',
  settingRead: 'SELECT value FROM settings WHERE name = $1',
};
