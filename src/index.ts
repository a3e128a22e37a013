export * from './server/index.js';
export * from './protocol/index.js';
export { SqliteTaskStore, sqliteStoreFromUrl, type SqliteStoreOptions } from './store/sqlite/index.js';
export type { TaskStore, TaskRecord } from './store/types.js';
export { PostgresTaskStore, PgSignalBus, postgresStoreFromUrl, type PostgresStoreOptions } from './store/postgres/index.js';
export { signalBusFromUrl, NoSignalBus } from './store/bus-url.js';
export { RedisSignalBus, type RedisSignalBusOptions } from './store/redis/bus.js';
