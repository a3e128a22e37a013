/**
 * The prompts and resources of several upstreams as one server's: each list is every upstream's, read in full (all
 * pages; one answer, no cursor); prompts are named `NAME__prompt` and `prompts/get` goes to NAME; resource URIs stay
 * as the upstream wrote them and `resources/read` goes to the upstream that listed the URI (or a template matching it).
 * An upstream that cannot answer is left out of a list (logged); the list fails only when none answers.
 */
import { McpServer, ProtocolError, UriTemplate } from '@modelcontextprotocol/server';
import { ErrorCode, type JsonObject } from '../protocol/index.js';
import type { Logger } from '../runtime/types.js';
import { ANY_RESULT, asGatewayResult } from './upstream.js';
import type { UpstreamSurface } from './passthrough.js';
import type { Redact } from './secrets.js';

export interface NamedSurface {
  name: string;
  surface: UpstreamSurface;
  /** What its failures' words go through before a caller or the log reads them (secrets.ts). */
  redact: Redact;
}

/** A bound on the pages read of one upstream's list (a server whose cursor never ends). */
const MAX_PAGES = 100;

export class MergedSurface {
  /** Resource URI → the upstream that listed it. */
  private readonly resourceOwner = new Map<string, NamedSurface>();
  private readonly templates = new Map<NamedSurface, UriTemplate[]>();

  constructor(
    private readonly upstreams: NamedSurface[],
    private readonly log: Logger,
  ) {}

  attach(mcp: McpServer): void {
    const prompts = this.having('prompts');
    if (prompts.length) {
      mcp.server.registerCapabilities({ prompts: { listChanged: true } });
      mcp.server.setRequestHandler('prompts/list', (async () => ({
        prompts: (await this.listAll(prompts, 'prompts/list', 'prompts')).flatMap(([u, items]) => items.map((p) => ({ ...p, name: `${u.name}__${String(p.name)}` }))),
      })) as never);
      mcp.server.setRequestHandler('prompts/get', (async (req: { params: JsonObject }) => {
        const name = String(req.params.name);
        // Upstream names hold no "__" and end in no "_" (upstreamNameProblem, ./index.ts), so the first "__" ends the name.
        const at = name.indexOf('__');
        const u = at > 0 ? prompts.find((p) => p.name === name.slice(0, at)) : undefined;
        if (!u) throw new ProtocolError(ErrorCode.InvalidParams, `Prompt "${name}" is not one of an upstream's (they are named UPSTREAM__PROMPT)`);
        return this.forward(u, 'prompts/get', { ...req.params, name: name.slice(u.name.length + 2) });
      }) as never);
    }
    const resources = this.having('resources');
    if (resources.length) {
      mcp.server.registerCapabilities({ resources: { listChanged: true } });
      mcp.server.setRequestHandler('resources/list', (async () => ({ resources: await this.listResources(resources) })) as never);
      mcp.server.setRequestHandler('resources/templates/list', (async () => ({ resourceTemplates: await this.listTemplates(resources) })) as never);
      mcp.server.setRequestHandler('resources/read', (async (req: { params: JsonObject }) => {
        const uri = String(req.params.uri);
        let u = this.ownerOf(uri);
        if (!u) {
          // Listed since, perhaps: read the lists again once.
          await Promise.all([this.listResources(resources).catch(() => undefined), this.listTemplates(resources).catch(() => undefined)]);
          u = this.ownerOf(uri);
        }
        if (!u) throw new ProtocolError(ErrorCode.InvalidParams, `Resource "${uri}" is listed by no upstream`);
        return this.forward(u, 'resources/read', req.params);
      }) as never);
    }
  }

  private having(kind: 'prompts' | 'resources'): NamedSurface[] {
    return this.upstreams.filter((u) => u.surface.capabilities()?.[kind]);
  }

  private ownerOf(uri: string): NamedSurface | undefined {
    return this.resourceOwner.get(uri) ?? [...this.templates].find(([, ts]) => ts.some((t) => t.match(uri)))?.[0];
  }

  private async listResources(upstreams: NamedSurface[]): Promise<JsonObject[]> {
    const lists = await this.listAll(upstreams, 'resources/list', 'resources');
    for (const [u, items] of lists) for (const r of items) this.resourceOwner.set(String(r.uri), u);
    return lists.flatMap(([, items]) => items);
  }

  private async listTemplates(upstreams: NamedSurface[]): Promise<JsonObject[]> {
    const lists = await this.listAll(upstreams, 'resources/templates/list', 'resourceTemplates');
    for (const [u, items] of lists) this.templates.set(u, items.map((t) => new UriTemplate(String(t.uriTemplate))));
    return lists.flatMap(([, items]) => items);
  }

  private async forward(u: NamedSurface, method: string, params: JsonObject): Promise<JsonObject> {
    const conn = await u.surface.control();
    const { _meta: _m, ...rest } = params;
    return asGatewayResult((await conn.client.request({ method, params: rest } as never, ANY_RESULT)) as JsonObject);
  }

  /** Every page of `method` from each upstream, in their order; those that fail are logged and left out. */
  private async listAll(upstreams: NamedSurface[], method: string, key: string): Promise<Array<[NamedSurface, JsonObject[]]>> {
    const settled = await Promise.allSettled(
      upstreams.map(async (u): Promise<[NamedSurface, JsonObject[]]> => {
        const items: JsonObject[] = [];
        let cursor: unknown;
        for (let page = 0; page < MAX_PAGES; page++) {
          const r = await this.forward(u, method, cursor === undefined ? {} : { cursor: cursor as string });
          items.push(...((r[key] as JsonObject[] | undefined) ?? []));
          cursor = r.nextCursor;
          if (typeof cursor !== 'string') break;
        }
        return [u, items];
      }),
    );
    const failed = settled.flatMap((s, i) => (s.status === 'rejected' ? [`upstream "${upstreams[i]!.name}": ${upstreams[i]!.redact((s.reason as Error).message)}`] : []));
    for (const f of failed) this.log.warn(`${method} left out ${f}`);
    if (failed.length === upstreams.length) throw new ProtocolError(ErrorCode.InternalError, `${method} failed on every upstream: ${failed.join('; ')}`);
    return settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  }
}
