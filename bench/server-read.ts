/**
 * Child process: the floor under tasks/get. A bare node:http server (127.0.0.1, port 0) that answers each JSON-RPC
 * request with one primary-key read of the tasks table: no MCP, no checks, no SDK.
 *   argv[2] = JSON { sqlite: path } (better-sqlite3, a prepared statement)
 *           | JSON { pg: {url, schema}, pool } (node-postgres Pool, a named prepared statement)
 *           , express: true: the same handler mounted in an Express 5 app (app.all('/mcp')), what Express itself costs
 * Answers {jsonrpc, id, result: row} for `params.taskId`. Sends {type:'ready', url, pid}; exits on SIGTERM or disconnect.
 * Takes CPU profiles (BENCH_PROFILE), so the floor's time can be read beside Outlast's.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import express from 'express';
import Database from 'better-sqlite3';
import pg from 'pg';
import { answerCpuUsage, childFail, exitWithParent, installProfiler, listenAsChild } from './common.js';

const cfg = JSON.parse(process.argv[2]!) as { sqlite?: string; pg?: { url: string; schema: string }; pool?: number; express?: boolean };

async function main(): Promise<void> {
  exitWithParent();
  answerCpuUsage();
  installProfiler();
  let read: (taskId: string) => Promise<unknown>;
  if (cfg.sqlite) {
    const db = new Database(cfg.sqlite, { readonly: true });
    const stmt = db.prepare('SELECT * FROM tasks WHERE task_id = ?');
    read = async (taskId) => stmt.get(taskId);
  } else {
    const pool = new pg.Pool({ connectionString: cfg.pg!.url, options: `-c search_path=${cfg.pg!.schema}`, max: cfg.pool ?? 10 });
    read = async (taskId) => (await pool.query({ name: 'get', text: 'SELECT * FROM tasks WHERE task_id = $1', values: [taskId] })).rows[0];
  }
  const answer = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        try {
          const msg = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: unknown; params: { taskId: string } };
          const row = await read(msg.params.taskId);
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result: row ?? null }));
        } catch (e) {
          res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32603, message: String(e) } }));
        }
      })();
    });
  };
  const app = cfg.express ? express().all('/mcp', answer) : undefined;
  await listenAsChild(createServer(app ?? answer));
}

main().catch(childFail);
