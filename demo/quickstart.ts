import { McpServer } from '@modelcontextprotocol/server';
import { Outlast, serveHttp } from 'outlast/server';
import { SqliteTaskStore } from 'outlast/store/sqlite';
import * as z from 'zod';

const outlast = new Outlast({ store: new SqliteTaskStore(process.env.TASKS_DB ?? '.outlast/quickstart.db') });
outlast.tool('reindex', { inputSchema: { collection: z.string() }, retrySafe: true }, async ({ collection }, ctx) => {
  for (let pct = 10; pct <= 100; pct += 10) {
    ctx.signal.throwIfAborted();                       // cancelled? stop before the next visible step
    await new Promise((r) => setTimeout(r, 300));      // ... real work goes here ...
    await ctx.status(`${collection}: ${pct}%`);        // what pollers and listeners see
  }
  return { content: [{ type: 'text', text: `Reindexed ${collection}` }] };
});
const { url } = await serveHttp(outlast, () => new McpServer({ name: 'indexer', version: '1.0.0' }), { port: Number(process.env.PORT ?? 3000) });
console.log(`outlast listening on ${url}`);
