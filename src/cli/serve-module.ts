/**
 * What `outlast serve FILE` mounts on the front: a `defineServer` module (the Outlast made from the flags), or a module
 * that makes its own Outlast, as the README's quick start does (served as it is; a flag that would change it is refused,
 * naming the option to set in its `new Outlast({...})` instead). The shapes are recognised in served-module.ts.
 */
import { McpServer } from '@modelcontextprotocol/server';
import { importServedModule } from '../server/module/served-module.js';
import { mountDefinedModule } from '../server/module/load-module.js';
import { silentLogger, type Logger } from '../runtime/types.js';
import type { FrontValues, MountOptions, MountedFront } from './front-command.js';

/** The flags that set an option of `new Outlast({...})`, and that option (what a module of its own Outlast sets). */
const OUTLAST_SETTING_FLAGS: Record<string, string> = {
  store: 'store',
  bus: 'bus',
  'default-ttl-ms': 'defaultTtlMs',
  'inline-budget-ms': 'inlineBudgetMs',
  concurrency: 'concurrencyLimit',
  'max-running': 'maxRunning',
  'tool-limit': 'toolLimits',
  'max-queued': 'maxQueued',
  'max-running-per-principal': 'maxRunningPerPrincipal',
  'max-queued-per-principal': 'maxQueuedPerPrincipal',
  'max-tasks-per-principal': 'maxTasksPerPrincipal',
  'queue-poll-ms': 'queuePollMs',
  'poll-interval-ms': 'defaultPollIntervalMs',
  'input-timeout-ms': 'defaultInputTimeoutMs',
  'park-after-ms': 'parkAfterMs',
  'max-result-bytes': 'maxResultBytes',
  'max-output-per-task': 'maxOutputPerTask',
  'max-output-bytes-per-task': 'maxOutputBytesPerTask',
  'sweep-interval-ms': 'sweepIntervalMs',
  'heartbeat-ms': 'heartbeatMs',
  'lease-ms': 'leaseMs',
  'no-poll-limit': 'pollLimit',
  handles: 'handles',
  'no-handles': 'handles',
  'handle-after-ms': 'handles.afterMs',
  'push-destination': 'pushDestinations',
  'no-answer-pages': 'answerPages',
};

export async function mountServedModule(path: string, values: FrontValues, options: MountOptions): Promise<MountedFront> {
  const served = await importServedModule(path);
  if (served.kind === 'definition') {
    const { outlast, factory, module } = await mountDefinedModule(served.module, options);
    return { outlast, factory, info: module.info, describe: module.info.name };
  }
  const { outlast, serverInfo, createServer } = served;
  const given = Object.keys(OUTLAST_SETTING_FLAGS).filter((f) => values[f] !== undefined);
  if (given.length) {
    const settings = [...new Set(given.map((f) => OUTLAST_SETTING_FLAGS[f]!))];
    throw new Error(
      `${path} makes its own Outlast, so ${given.map((f) => `--${f}`).join(', ')} cannot change it: set ${settings.join(', ')} in its new Outlast({...}) ` +
        '(docs/configuration.md names the option of each flag), or default-export defineServer({...}) to take them from the command line',
    );
  }
  if (values['public-url'] !== undefined && outlast.handles && !outlast.answers) {
    throw new Error(`${path} makes its own Outlast, so --public-url cannot give it answer pages: set answerPages: { publicUrl } in its new Outlast({...})`);
  }
  // Made without a log, it logs with the CLI's (--log-level, --log-format), as a defineServer module's Outlast does.
  if (outlast.runtime.log === silentLogger) (outlast.runtime as { log: Logger }).log = options.log;
  const name = serverInfo?.name ?? path;
  if (!serverInfo) options.log.info(`${path} exports no serverInfo: task polls go through createServer() (export serverInfo to answer them from the store, the direct path)`);
  return { outlast, factory: createServer ?? (() => new McpServer(serverInfo!)), ...(serverInfo ? { info: serverInfo } : {}), describe: name };
}
