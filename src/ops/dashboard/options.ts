/** What the dashboard is configured with, and what it is to the front that mounts it. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { SignalBus } from '../../store/local-bus.js';
import type { TaskStore } from '../../store/types.js';
import type { OperatorTokens } from './auth.js';
import type { AlertTargets } from './format.js';

export interface DashboardOptions extends OperatorTokens {
  store: TaskStore;
  bus: SignalBus;
  /** The interface the server listens on: without operator tokens the dashboard refuses anything but loopback. */
  host: string;
  /** Default /dashboard. */
  basePath?: string;
  /** A replica whose heartbeat is older than this is shown lost. Default 30 000 ms. */
  leaseMs?: number;
  /** Show task arguments and results on task pages. Default false. */
  showPayloads?: boolean;
  /** Shown in the header (an environment badge, e.g. "production"). Default: the store's backend. */
  title?: string;
  /** The address people reach the dashboard at (through a proxy, say): with https the sign-in cookie is Secure, and
   *  forms posted from this origin are accepted where the proxy passes another Host. */
  publicUrl?: string;
  /** How long a browser's sign-in lasts however it is used, ms. Default 12 h. */
  sessionMs?: number;
  /** A browser's sign-in not used for this long ends, ms. Default 1 h. */
  sessionIdleMs?: number;
  /** Where this server sends alerts (its `--alert-webhook` and push destinations), so the pages can say where they
   *  go and which are not sent. Unset: the dashboard runs apart from the servers and says it cannot know. */
  alertTargets?: AlertTargets;
  /** Actions are logged here (who did what). */
  log?: (msg: string, extra: Record<string, unknown>) => void;
}

export interface Dashboard {
  readonly basePath: string;
  /** Whether this request is for the dashboard (its path is under basePath). */
  owns(pathname: string): boolean;
  handle(req: IncomingMessage, res: ServerResponse): Promise<void>;
  close(): void;
}
