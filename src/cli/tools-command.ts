/**
 * `outlast tools URL | --stdio "CMD ARGS"`: the server's tools, one line each, fitted to the terminal (100 columns
 * when not on one): the name, how it runs as a task (Outlast's `policy` in `_meta["outlast/policy"]`, else a
 * 2025-11-25 server's `execution.taskSupport`), behind `outlast gateway` the upstream it comes from
 * (`_meta["outlast/upstream"]`), and the first sentence of its description. `--json`: the tools as listed.
 */
import { TASK_POLICY_META, UPSTREAM_META, type JsonObject } from '../protocol/index.js';
import { TaskClient } from '../client/task-client.js';
import type { ToolDefinition } from '../client/tool-catalog.js';
import { Exit, parse, reach } from './client-commands.js';
import { stdioServerKey } from './stdio-options.js';
import { tableLines, tableWidth } from './table.js';
import { UsageError } from './usage.js';

/** How a tool runs as a task, in a word: Outlast's policy, else the 2025-11-25 `execution.taskSupport`. */
export function taskSupportOf(t: ToolDefinition): string {
  const meta = t._meta as JsonObject | undefined;
  const policy = meta?.[TASK_POLICY_META];
  if (typeof policy === 'string') return policy;
  const support = (t.execution as { taskSupport?: unknown } | undefined)?.taskSupport;
  return typeof support === 'string' ? support : '-';
}

function upstreamOf(t: ToolDefinition): string | undefined {
  const u = (t._meta as JsonObject | undefined)?.[UPSTREAM_META];
  return typeof u === 'string' ? u : undefined;
}

/** The description's first sentence (the rest is in --json). */
function summary(description: unknown): string {
  if (typeof description !== 'string') return '';
  const flat = description.replace(/\s+/g, ' ').trim();
  const end = /[.!?](\s|$)/.exec(flat);
  return end ? flat.slice(0, end.index + 1) : flat;
}

/** The tools as a table of `width` columns at most. */
export function toolsTable(tools: ToolDefinition[], width: number): string[] {
  const gateway = tools.some((t) => upstreamOf(t) !== undefined);
  // A name is never cut (it is what one types next); the upstream and the description give way.
  const columns = [{ header: 'TOOL' }, { header: 'TASKS' }, ...(gateway ? [{ header: 'UPSTREAM', min: 8 }] : []), { header: 'DESCRIPTION' }];
  const rows = tools.map((t) => [t.name, taskSupportOf(t), ...(gateway ? [upstreamOf(t) ?? '-'] : []), summary(t.description)]);
  return tableLines(columns, rows, width);
}

export async function tools(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, 'tools', ['stdio', 'cwd', 'env']);
  const stdioKey = stdioServerKey(values);
  const [server, ...more] = stdioKey ? [stdioKey, ...positionals] : positionals;
  if (!server) throw new UsageError('usage: outlast tools URL (or outlast tools --stdio "CMD ARGS")');
  if (more.length) throw new UsageError(`unexpected argument "${more[0]}"; outlast tools takes the server only`);
  if (stdioKey && values.bearer !== undefined) throw new UsageError('--bearer is for a server reached by URL; a --stdio server takes its credentials from its environment (--env K=V)');
  let client: TaskClient;
  try {
    client = new TaskClient({ ...reach(server, values), clientInfo: { name: 'outlast-cli', version: '0.1.0' }, retry: { attempts: 3 } });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  try {
    const list = await client.listTools();
    if (values.json) {
      process.stdout.write(JSON.stringify(list.tools, null, 2) + '\n');
    } else if (list.tools.length) {
      process.stdout.write(toolsTable(list.tools, tableWidth(process.stdout)).join('\n') + '\n');
    } else {
      process.stderr.write(`${stdioKey ? values.stdio : server} lists no tools\n`);
    }
    for (const r of list.rejected) process.stderr.write(`${r.name}: left out, its inputSchema is invalid (${r.reason})\n`);
    return 0;
  } catch (e) {
    throw new Exit(1, `tools: ${(e as Error).message}`);
  } finally {
    await client.close();
  }
}
