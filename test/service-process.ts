/**
 * A server process a test starts for itself (PgBouncer, redis-server): spawned, waited for until it answers,
 * stopped by its process id (and always by the end of the run), startable again on the same port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { after } from 'node:test';
import { sleep } from './helpers.js';

export interface ServiceProcess {
  start(): Promise<void>;
  stop(): Promise<void>;
}

const running = new Set<ServiceProcess>();
after(async () => {
  for (const s of [...running]) await s.stop();
});

export function serviceProcess(name: string, command: string, args: string[], answers: () => Promise<boolean>, describe: () => string = () => '', stopSignal: NodeJS.Signals = 'SIGTERM'): ServiceProcess {
  let child: ChildProcess | undefined;
  const s: ServiceProcess = {
    async start() {
      if (child) return;
      const c = spawn(command, args, { stdio: 'ignore' });
      child = c;
      c.once('exit', () => {
        if (child === c) child = undefined;
      });
      running.add(s);
      const deadline = Date.now() + 10_000;
      while (!(await answers())) {
        if (!child) throw new Error(`${name} exited at start${describe()}`);
        if (Date.now() > deadline) throw new Error(`${name} did not answer in 10 s${describe()}`);
        await sleep(20);
      }
    },
    async stop() {
      const c = child;
      running.delete(s);
      child = undefined;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => c.once('exit', () => resolve()));
      process.kill(c.pid!, stopSignal);
      await Promise.race([gone, sleep(5000)]);
      if (c.exitCode === null && c.signalCode === null) {
        process.kill(c.pid!, 'SIGKILL');
        await gone;
      }
    },
  };
  return s;
}
