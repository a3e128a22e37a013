/**
 * What a TaskClient knows about one server's tools: the last `tools/list`, kept so each `tools/call` can carry the
 * `Mcp-Param-*` headers its tool declares (SEP-2243). Tools whose `x-mcp-header` declarations break the spec's
 * constraints are left out of the list (the spec's MUST) and kept aside with the reason, so calling one fails
 * with that reason instead of with a header mismatch from the server.
 */
import type { JsonObject } from '../protocol/index.js';
import { RejectedToolError } from './errors.js';
import { paramHeaders, scanHeaderParams, type HeaderParam } from './param-headers.js';

/** One tool as `tools/list` describes it. */
export type ToolDefinition = JsonObject & { name: string; description?: string; inputSchema?: JsonObject };

export interface RejectedTool {
  name: string;
  reason: string;
}

/** The usable tools, and those left out because of invalid `x-mcp-header` declarations. */
export interface ToolList {
  tools: ToolDefinition[];
  rejected: RejectedTool[];
}

export class ToolCatalog {
  private readonly params = new Map<string, HeaderParam[]>();
  private readonly rejected = new Map<string, string>();

  /** Replaces what is known with a complete `tools/list` (every page). */
  replace(listed: readonly unknown[]): ToolList {
    this.params.clear();
    this.rejected.clear();
    const out: ToolList = { tools: [], rejected: [] };
    for (const tool of listed) {
      if (typeof tool !== 'object' || tool === null || typeof (tool as { name?: unknown }).name !== 'string') continue;
      const t = tool as ToolDefinition;
      const scan = scanHeaderParams(t.inputSchema);
      if (scan.ok) {
        this.params.set(t.name, scan.params);
        out.tools.push(t);
      } else {
        this.rejected.set(t.name, scan.reason);
        out.rejected.push({ name: t.name, reason: scan.reason });
      }
    }
    return out;
  }

  /**
   * The `Mcp-Param-*` headers of a call to `tool` (none when the tool is not known yet: the spec's "send without,
   * refresh on a refusal"). Throws RejectedToolError for a tool whose declarations are invalid.
   */
  headersFor(tool: string, args: JsonObject): Record<string, string> {
    this.assertCallable(tool);
    const params = this.params.get(tool);
    return params ? paramHeaders(params, args) : {};
  }

  /** Throws RejectedToolError when the last `tools/list` left this tool out for its declarations. */
  assertCallable(tool: string): void {
    const reason = this.rejected.get(tool);
    if (reason !== undefined) throw new RejectedToolError(tool, reason);
  }
}
