/**
 * (ad) and (ae): `outlast gateway` in front of the official reference server (`@modelcontextprotocol/server-everything`),
 * every server a real process (the gateway and `outlast serve` as the CLI starts them, with bench/heap-probe.js
 * preloaded for CPU and profiles), the load from bench/load.ts; the sides of both rows in one rotation of rounds.
 *   (ad.http) an inline `echo` tools/call through the gateway (--http: its connections to the upstream are
 *       Streamable HTTP sessions) vs the same request straight to that upstream's Streamable HTTP endpoint (one
 *       session). Target >= 0.8.
 *   (ad.stdio) an inline `echo` tools/call through the gateway (--stdio: its upstream is server-everything's stdio
 *       process, a pool of them) vs the least a stdio server needs to be called over HTTP at all: a bare node:http
 *       pass-through to one stdio process of the same server (bench/stdio-bridge.ts; what supergateway and mcp-proxy
 *       do). Both sides are HTTP in front and stdio behind, so the ratio is the gateway's own cost. Target >= 0.8.
 *   (ad.front) info: the gateway --stdio side of (ad.stdio) vs the same echo answered in-process by `outlast serve`
 *       (bench/echo-module.ts): what the upstream leg costs beside the front and runtime both have.
 *   (ad.peer) the gateway --stdio side of (ad.stdio) vs supergateway (bench/peers: stdio -> Streamable HTTP, --stateful,
 *       one session per concurrent client, each its own upstream process; without --stateful it starts a process per
 *       request), same upstream and request. Target >= 1.0 and CPU per call at most the peer's (issue 43).
 *   (ae) tasks/get on the gateway, cycling 1,000 working tasks (long upstream calls: trigger-long-running-operation
 *       for a day), vs (s)'s tasks/get on `outlast serve` (the 40-tool application of bench/poll-module.ts), 1,000
 *       parked tasks; both on SQLite. Target >= 0.9.
 * Every side's CPU is read from /proc for its processes (the gateway and its upstreams; the upstream alone; the bridge
 * and its upstream), so the cost per request is the whole path's.
 * All requests are 2025-11-25 tools/calls (server-everything speaks that generation), byte-identical on both sides of
 * a row but for the session header the upstream's endpoint requires.
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  Child,
  ROOT,
  benchFile,
  childPids,
  legacyWire,
  openSession,
  send,
  startCli,
  tasksGet,
  toolCall,
  trackProcess,
  type BenchRow,
  type Served,
  type WireRequest,
} from './common.js';
import { ensurePeers, peerPath } from './peers.js';
import { row, type PollingSide } from './polling.js';

export interface GatewayEnv {
  only: Set<string>;
  concurrency: number;
  dir: string;
  /** Connections the gateway keeps to its upstream (its --upstream-pool); unset, the gateway's defaults. */
  pool: number | undefined;
  startServer(file: string, args: string[]): Promise<{ child: Child; url: string }>;
  alternate(sides: PollingSide[], seconds?: number): Promise<void>;
  log(m: string): void;
}

const EVERYTHING = join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js');
const TASKS = 1000;
const echo = legacyWire('tools/call', { name: 'echo', arguments: { message: 'hi' } });
const echoed = (j: any) => j?.result?.content?.[0]?.text === 'Echo: hi';

/** A CLI process (gateway, serve) with the probe preloaded, as a Child the rotation can ask for CPU and profiles. */
async function cli(argv: string[]): Promise<Served & { child: Child }> {
  const probe = pathToFileURL(benchFile('heap-probe.js')).href;
  const s = await startCli(argv, {}, { nodeArgs: ['--import', probe], ipc: true });
  return { ...s, child: new Child(s.proc) };
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/** server-everything over Streamable HTTP, its per-request console.log to nowhere; resolves once it answers. */
async function everythingHttp(): Promise<{ url: string; pid: number; stop(): void }> {
  const port = await freePort();
  const proc = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] });
  trackProcess(proc);
  let err = '';
  proc.stderr!.on('data', (d) => (err = (err + d).slice(-2000)));
  const url = `http://127.0.0.1:${port}/mcp`;
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`server-everything streamableHttp exited (${proc.exitCode}): ${err}`);
    if (await fetch(url).then(() => true, () => false)) break;
    if (i > 300) throw new Error(`server-everything streamableHttp did not listen on ${port}: ${err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, pid: proc.pid!, stop: () => proc.kill('SIGTERM') };
}

async function check(url: string, r: WireRequest, want: (j: any) => boolean, label: string): Promise<any> {
  const x = await send(url, r);
  if (x.status !== 200 || !want(x.json)) throw new Error(`${label}: unexpected answer ${x.status} ${x.text.slice(0, 300)}`);
  return x.json;
}

/** `count` working tasks of `request` on `url`, a few creations in flight; the tasks/get of each. */
async function workingTasks(url: string, request: WireRequest, count: number): Promise<WireRequest[]> {
  const ids: string[] = [];
  const one = async () => {
    while (ids.length < count) {
      const j = await check(url, request, (j) => j?.result?.resultType === 'task', `task on ${url}`);
      ids.push(j.result.taskId);
    }
  };
  await Promise.all(Array.from({ length: 8 }, one));
  ids.length = count;
  await check(url, tasksGet(ids[0]!), (j) => j?.result?.status === 'working', `tasks/get on ${url}`);
  return ids.map(tasksGet);
}

/** supergateway in front of the stdio upstream (stateful Streamable HTTP); resolves once it answers its health path. */
async function supergateway(command: string): Promise<{ url: string; pid: number; stop(): void }> {
  ensurePeers();
  const port = await freePort();
  const args = [peerPath('supergateway/dist/index.js'), '--stdio', command, '--outputTransport', 'streamableHttp', '--stateful', '--port', String(port), '--logLevel', 'none', '--healthEndpoint', '/healthz'];
  const proc = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  trackProcess(proc);
  let err = '';
  proc.stderr!.on('data', (d) => (err = (err + d).slice(-2000)));
  for (let i = 0; ; i++) {
    if (proc.exitCode !== null) throw new Error(`supergateway exited (${proc.exitCode}): ${err}`);
    if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) break;
    if (i > 300) throw new Error(`supergateway did not listen on ${port}: ${err}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url: `http://127.0.0.1:${port}/mcp`, pid: proc.pid!, stop: () => proc.kill('SIGTERM') };
}

export async function gatewayRows(env: GatewayEnv): Promise<BenchRow[]> {
  const PEER = env.only.has('ad.peer');
  const AD = env.only.has('ad');
  const AE = env.only.has('ae');
  const stdioUpstream = `${process.execPath} ${EVERYTHING} stdio`;
  const poolFlag = env.pool === undefined ? [] : ['--upstream-pool', String(env.pool)];
  const poolName = env.pool === undefined ? 'default pool' : `pool ${env.pool}`;
  const front = (db: string) => ['--port', '0', '--store', `sqlite:${join(env.dir, db)}`, '--no-poll-limit'];
  const stops: Array<() => unknown> = [];
  const sides: PollingSide[] = [];
  const side = (name: string, url: string, requests: WireRequest[], pids: () => number[], child?: Child): PollingSide => {
    const s: PollingSide & { cpuPids: () => number[] } = { name, url, requests, concurrency: env.concurrency, results: [], cpuPids: pids, ...(child ? { child } : {}) };
    sides.push(s);
    return s;
  };
  const withChildren = (pid: number) => () => [pid, ...childPids(pid)];
  try {
    let adHttp: [PollingSide, PollingSide] | undefined;
    let adStdio: [PollingSide, PollingSide] | undefined;
    let ae: [PollingSide, PollingSide] | undefined;
    let adFront: PollingSide | undefined;
    let adPeer: [PollingSide, PollingSide] | undefined;
    if (PEER) {
      const gw = await cli(['gateway', '--stdio', stdioUpstream, '--name', 'everything', ...poolFlag, ...front('ad-peer.db')]);
      stops.push(() => gw.stop());
      const peer = await supergateway(stdioUpstream);
      stops.push(peer.stop);
      // One session per concurrent client, as each of them would open (each is an upstream process of its own).
      const sessions: WireRequest[] = [];
      for (let i = 0; i < env.concurrency; i++) sessions.push({ headers: { ...echo.headers, ...(await openSession(peer.url)) }, body: echo.body });
      await check(gw.url, echo, echoed, 'echo through the gateway (stdio upstream)');
      await check(peer.url, sessions[0]!, echoed, 'echo through supergateway');
      adPeer = [
        side(`echo via gateway --stdio (${poolName})`, gw.url, [echo], withChildren(gw.pid), gw.child),
        side(`echo via supergateway --stateful, ${env.concurrency} sessions`, peer.url, sessions, withChildren(peer.pid)),
      ];
      adPeer[1].pinned = true;
    }
    if (AD) {
      const upstream = await everythingHttp();
      stops.push(upstream.stop);
      const direct = { headers: { ...echo.headers, ...(await openSession(upstream.url)) }, body: echo.body };
      const gwHttp = await cli(['gateway', '--http', upstream.url, '--name', 'everything', ...poolFlag, ...front('ad-http.db')]);
      stops.push(() => gwHttp.stop());
      const gwStdio = await cli(['gateway', '--stdio', stdioUpstream, '--name', 'everything', ...poolFlag, ...front('ad-stdio.db')]);
      stops.push(() => gwStdio.stop());
      const bridge = await env.startServer('stdio-bridge.js', [JSON.stringify({ command: process.execPath, args: [EVERYTHING, 'stdio'] })]);
      const inProcess = await cli(['serve', join(ROOT, 'dist', 'bench', 'echo-module.js'), '--handles', ...front('ad-front.db')]);
      stops.push(() => inProcess.stop());
      await check(inProcess.url, echo, echoed, 'echo in-process on outlast serve');
      await check(upstream.url, direct, echoed, 'echo straight to the upstream');
      await check(gwHttp.url, echo, echoed, 'echo through the gateway (HTTP upstream)');
      await check(gwStdio.url, echo, echoed, 'echo through the gateway (stdio upstream)');
      await check(bridge.url, echo, echoed, 'echo through the stdio bridge');
      adHttp = [
        side(`echo via gateway --http (${poolName})`, gwHttp.url, [echo], () => [gwHttp.pid, upstream.pid], gwHttp.child),
        side('echo straight to server-everything streamableHttp', upstream.url, [direct], () => [upstream.pid]),
      ];
      adStdio = [
        side(`echo via gateway --stdio (${poolName})`, gwStdio.url, [echo], withChildren(gwStdio.pid), gwStdio.child),
        side('echo via bare stdio bridge', bridge.url, [echo], withChildren(bridge.child.pid), bridge.child),
      ];
      adFront = side('echo in-process on outlast serve --handles', inProcess.url, [echo], () => [inProcess.pid], inProcess.child);
    }
    if (AE) {
      // Every task runs (one principal): its running share is sized for them; 4 hold upstream calls, the rest wait for
      // a connection, all "working". Inline budget 0: a call is a task at once (the creations are quick).
      const running = ['--max-running-per-principal', String(TASKS + 100)];
      const gw = await cli(['gateway', '--stdio', stdioUpstream, '--name', 'everything', ...poolFlag, '--inline-budget-ms', '0', ...running, ...front('ae-gw.db')]);
      stops.push(() => gw.stop());
      const served = await cli(['serve', join(ROOT, 'dist', 'bench', 'poll-module.js'), ...running, ...front('ae-serve.db')]);
      stops.push(() => served.stop());
      const long = toolCall('trigger-long-running-operation', { duration: 86_400, steps: 1 });
      env.log(`(ae) ${TASKS} working tasks on each side`);
      const [gwGets, serveGets] = await Promise.all([workingTasks(gw.url, long, TASKS), workingTasks(served.url, toolCall('park'), TASKS)]);
      ae = [
        side('tasks/get on the gateway (SQLite)', gw.url, gwGets, withChildren(gw.pid), gw.child),
        side('tasks/get on outlast serve, 40 tools (SQLite)', served.url, serveGets, () => [served.pid], served.child),
      ];
    }
    env.log(`(ad)/(ae) ${sides.length} sides, concurrency ${env.concurrency}`);
    await env.alternate(sides);

    const rows: BenchRow[] = [];
    const cpuNote = (r: BenchRow) => ({ ...r, note: r.note!.replace('server CPU per request', 'CPU per request of the side\'s processes') });
    if (adHttp) rows.push(cpuNote(row('ad.http', 'inline echo tools/call through outlast gateway --http server-everything (req/s)', adHttp[0], 'the same request straight to server-everything\'s Streamable HTTP endpoint (one session)', adHttp[1], 0.8)));
    if (adStdio) rows.push(cpuNote(row('ad.stdio', 'inline echo tools/call through outlast gateway --stdio server-everything (req/s)', adStdio[0], 'the same request through a bare node:http pass-through to one server-everything stdio process', adStdio[1], 0.8)));
    if (adStdio && adFront) rows.push(cpuNote(row('ad.front', 'inline echo tools/call through outlast gateway --stdio server-everything (req/s)', adStdio[0], 'the same tool answered in-process by outlast serve --handles (same schema and policy): the front and runtime without the upstream leg', adFront, undefined)));
    if (adPeer) rows.push(cpuNote(row('ad.peer', 'inline echo tools/call through outlast gateway --stdio server-everything (req/s)', adPeer[0], 'the same request through supergateway 4 (stdio -> Streamable HTTP, --stateful: a session and an upstream process per client)', adPeer[1], 1.0)));
    if (ae) rows.push(cpuNote(row('ae', `tasks/get on outlast gateway, cycling ${TASKS} working upstream calls (req/s)`, ae[0], `(s): tasks/get on outlast serve, 40 tools, ${TASKS} working tasks`, ae[1], 0.9)));
    return rows;
  } finally {
    for (const stop of stops.reverse()) await stop();
    await Promise.all(sides.map((s) => s.child?.kill()));
  }
}
