/**
 * The CLI's log: one event per line on stderr, as text or JSON (`--log-format json`), with the replica and whatever
 * the event names (task id, tool, principal). A client's malformed request is the client's problem, logged at
 * `info` as `client request rejected`, so a burst of bad requests pages nobody who alerts on `error`.
 */
import type { Logger } from '../runtime/types.js';

export const LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogFormat = 'text' | 'json';

export interface CliLogger extends Logger {
  /** Adds the replica id to every later line. */
  setReplica(id: string): void;
  /** For the HTTP front's `onerror`: requests the SDK rejected are a client's error, anything else the server's. */
  serverError(e: Error): void;
  /** A start-up line on stdout, the one scripts wait for (`outlast listening on URL`): as it is, or with
   *  `--log-format json` one JSON object like every other line (`msg` the same text, `extra` its fields). */
  announce(msg: string, extra?: object): void;
}

export function cliLogger(level: string, format: string): CliLogger | string {
  const min = LEVELS.indexOf(level as (typeof LEVELS)[number]);
  if (min < 0) return `--log-level must be one of ${LEVELS.join(', ')}`;
  if (format !== 'text' && format !== 'json') return '--log-format must be text or json';
  let replica: string | undefined;
  const json = (l: string, msg: string, extra?: object) => JSON.stringify({ time: new Date().toISOString(), level: l, msg, ...(replica ? { replica } : {}), ...extra }) + '\n';
  const at = (l: (typeof LEVELS)[number]) => (msg: string, extra?: object) => {
    if (LEVELS.indexOf(l) < min) return;
    const time = new Date().toISOString();
    if (format === 'json') process.stderr.write(json(l, msg, extra));
    else process.stderr.write(`${time} ${l} ${msg}${extra && Object.keys(extra).length ? ' ' + JSON.stringify(extra) : ''}\n`);
  };
  const log = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  return {
    ...log,
    setReplica: (id) => void (replica = id),
    announce: (msg, extra) => void process.stdout.write(format === 'json' ? json('info', msg, extra) : `${msg}\n`),
    serverError(e) {
      const m = /^Rejected inbound request \(([^)]*)\): ([\s\S]*)$/.exec(e.message);
      if (m) log.info('client request rejected', { rule: m[1], reason: m[2]!.slice(0, 300) });
      else log.error(e.message);
    },
  };
}
