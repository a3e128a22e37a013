/**
 * The upstream's tools as Outlast tools: listed at start and again whenever the upstream says its list changed, each
 * defined with the upstream's own JSON Schema (compiled once per change of that tool, never per request), its
 * annotations, and whether re-running it after a lost replica is safe (`readOnlyHint`, `idempotentHint`, or
 * `--retry-safe TOOL`). Clients hear `notifications/tools/list_changed` when the mirror changed. Behind a gateway of
 * several upstreams each tool is served as `PREFIX__tool` (the upstream is called with its own name); each names its
 * upstream in `_meta["outlast/upstream"]`, so `outlast tools` can say where it comes from.
 */
import type { Outlast } from '../server/outlast.js';
import { UPSTREAM_META, type JsonObject } from '../protocol/index.js';
import type { Logger } from '../runtime/types.js';
import { coalesced } from '../runtime/coalesce.js';
import type { UpstreamPool } from './pool.js';
import type { UpstreamConnection } from './upstream.js';
import { upstreamCallName, upstreamToolHandler } from './call.js';
import { redactorOf } from './secrets.js';

export interface MirrorOptions {
  outlast: Outlast;
  pool: UpstreamPool;
  /** The connection that lists (not one of the pool's: listing never waits behind a long call). */
  control: () => Promise<UpstreamConnection>;
  /** Served names (prefixed when set), as retrySafeTools names them. */
  retrySafeTools: Set<string>;
  callTimeoutMs: number | undefined;
  log: Logger;
  /** Tools are served as `${prefix}__${name}` (a gateway of several upstreams). */
  prefix?: string;
  /** Served tool name → whose it is, shared by the mirrors of one gateway: a name two upstreams would serve is refused. */
  owners: Map<string, string>;
}

/** The longest tool name served under a prefix (what hosts such as Claude and OpenAI accept). */
export const MAX_PREFIXED_NAME = 64;

interface UpstreamTool {
  name: string;
  title?: string;
  description?: string;
  inputSchema?: JsonObject;
  annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean } & JsonObject;
  execution?: { taskSupport?: string };
}

/** How soon a failed listing is tried again when a request asks for the tools. */
const RETRY_AFTER_MS = 1000;

export class ToolMirror {
  /** Upstream tool → the JSON of its definition (a changed definition is defined again). */
  private readonly defined = new Map<string, string>();
  /** Why tools of the latest listing are not served under their names (too long, taken by another upstream). */
  nameProblems: string[] = [];
  private lastError: { message: string; at: number } | undefined;
  private listedOnce = false;
  readonly refresh: () => Promise<void>;

  constructor(private readonly o: MirrorOptions) {
    this.refresh = coalesced(() => this.list());
  }

  /** Why the tools cannot be listed now (the upstream cannot start, say), after one more try if the last failed a
   *  while ago; undefined once they can. */
  async unavailable(): Promise<string | undefined> {
    if (this.lastError && Date.now() - this.lastError.at >= RETRY_AFTER_MS) await this.refresh();
    return this.reason();
  }

  /** Why the tools cannot be listed, as last tried (no new try). */
  reason(): string | undefined {
    return this.lastError && !this.listedOnce ? this.lastError.message : undefined;
  }

  private async list(): Promise<void> {
    let tools: UpstreamTool[];
    try {
      const conn = await this.o.control();
      tools = (await conn.client.listTools(undefined, { cacheMode: 'bypass' })).tools as unknown as UpstreamTool[];
    } catch (e) {
      // A caller reads this (tools/list, tools/call): without the upstream's secrets.
      const message = redactorOf(this.o.pool.spec)(`The tools of upstream "${this.o.pool.spec.name}" cannot be listed: ${(e as Error).message}`);
      this.lastError = { message, at: Date.now() };
      this.o.log.error(this.lastError.message);
      return;
    }
    this.lastError = undefined;
    this.listedOnce = true;
    let changed = false;
    const seen = new Set<string>();
    this.nameProblems = [];
    for (const t of tools) {
      seen.add(t.name);
      const text = JSON.stringify([t.title, t.description, t.inputSchema, t.annotations, t.execution]);
      if (this.defined.get(t.name) === text) continue;
      if (this.defined.has(t.name)) this.o.outlast.removeTool(this.served(t.name));
      const problem = this.claim(t.name);
      if (problem) {
        this.nameProblems.push(problem);
        this.o.log.error(problem);
        continue;
      }
      try {
        this.define(t);
        this.defined.set(t.name, text);
        changed = true;
      } catch (e) {
        this.defined.delete(t.name);
        this.release(t.name);
        this.o.log.error(`upstream tool "${t.name}" is not served: ${(e as Error).message}`);
      }
    }
    for (const name of [...this.defined.keys()]) {
      if (seen.has(name)) continue;
      this.o.outlast.removeTool(this.served(name));
      this.release(name);
      this.defined.delete(name);
      changed = true;
    }
    if (changed) {
      this.o.log.info(`mirroring ${this.defined.size} tools of upstream "${this.o.pool.spec.name}"`);
      this.o.outlast.notifier()?.toolsChanged();
    }
  }

  /** The name a client calls the upstream tool `name` by. */
  served(name: string): string {
    return this.o.prefix === undefined ? name : `${this.o.prefix}__${name}`;
  }

  private owner(name: string): string {
    return `tool "${name}" of upstream "${this.o.pool.spec.name}"`;
  }

  /** Takes the served name of upstream tool `name`, or says why it cannot be served under it. */
  private claim(name: string): string | undefined {
    const served = this.served(name);
    if (this.o.prefix !== undefined && served.length > MAX_PREFIXED_NAME) {
      return `${this.owner(name)} is not served: "${served}" is longer than ${MAX_PREFIXED_NAME} characters (give the server a shorter name)`;
    }
    const taken = this.o.owners.get(served);
    if (taken !== undefined && taken !== this.owner(name)) return `${this.owner(name)} is not served: "${served}" is already the name of ${taken} (rename one of the servers)`;
    this.o.owners.set(served, this.owner(name));
    return undefined;
  }

  private release(name: string): void {
    if (this.o.owners.get(this.served(name)) === this.owner(name)) this.o.owners.delete(this.served(name));
  }

  private define(t: UpstreamTool): void {
    const a = t.annotations ?? {};
    const retrySafe = a.readOnlyHint === true || a.idempotentHint === true || this.o.retrySafeTools.has(this.served(t.name));
    this.o.outlast.tool(
      this.served(t.name),
      {
        ...(t.title !== undefined ? { title: t.title } : {}),
        ...(t.description !== undefined ? { description: t.description } : {}),
        inputJsonSchema: t.inputSchema ?? { type: 'object' },
        ...(t.annotations !== undefined ? { annotations: t.annotations } : {}),
        _meta: { [UPSTREAM_META]: this.o.pool.spec.name },
        retrySafe,
        lostWork: upstreamCallName(t.name, this.o.pool.spec.name),
      },
      upstreamToolHandler({ pool: this.o.pool, tool: t.name, taskRequired: t.execution?.taskSupport === 'required', callTimeoutMs: this.o.callTimeoutMs, retrySafe, log: this.o.log }),
    );
  }
}
