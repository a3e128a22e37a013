/**
 * The fixture server behind the SDK's handler alone (createMcpHandler + toNodeHandler, `outlast.attach(mcp, ctx)` in
 * the factory), with no Outlast front: what a user gets who skips outlastHandler. For front.test.ts.
 *   node dist/test/bare-sdk-app.js   (OUTLAST_STORE, PORT)
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createMcpHandler } from '@modelcontextprotocol/server';
import { toNodeHandler } from '@modelcontextprotocol/node';
import { loadServerModule } from '../src/server/index.js';
import { fileURLToPath } from 'node:url';

const store = process.env.OUTLAST_STORE;
// node --test loads every module of dist/test: without a store to serve this is a program not being run, so it does nothing.
if (store) await serve(store);

async function serve(store: string): Promise<void> {
  const fixtures = fileURLToPath(new URL('../fixtures/server.js', import.meta.url));
  const { outlast, factory } = await loadServerModule(fixtures, { store });
  await outlast.start();
  const handler = createMcpHandler(async (ctx) => outlast.attach(await factory(ctx), ctx));
  const server = createServer(toNodeHandler(handler));
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`));
  process.once('SIGTERM', async () => {
    await handler.close();
    await outlast.stop(1000);
    process.exit(0);
  });
}
