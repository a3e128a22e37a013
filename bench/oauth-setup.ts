/**
 * (y) / (y.intro) set-up: a real authorization server (fixtures/oidc-as.ts, oidc-provider) and three `outlast serve`
 * processes of the fixture server on SQLite: one with a static bearer token, one with a JWT access token (verified
 * once, then its result cached: the default), one verifying the JWT's signature on every request (JWKS cached), one
 * introspecting an opaque token (its cache on). Each holds one task for tasks/get to read.
 */
import { spawn } from 'node:child_process';
import { freePort } from '../fixtures/service-process.js';
import { join } from 'node:path';
import { ROOT, serve, send, tempDir, toolCall, trackProcess, type Served } from './common.js';

export interface OAuthSide {
  name: 'static' | 'jwt' | 'jwt-nocache' | 'intro';
  url: string;
  token: string;
  taskId: string;
}


async function startAuthServer(jwt: string[], opaque: string): Promise<{ issuer: string; stop(): void }> {
  const proc = spawn(process.execPath, [join(ROOT, 'dist', 'fixtures', 'oidc-as.js')], {
    cwd: ROOT,
    env: { ...process.env, OIDC_AS_JWT_RESOURCES: jwt.join(','), OIDC_AS_OPAQUE_RESOURCES: opaque },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  trackProcess(proc);
  proc.stderr!.resume();
  const issuer = await new Promise<string>((resolve, reject) => {
    let out = '';
    const t = setTimeout(() => reject(new Error('oidc-as did not start')), 30_000);
    proc.stdout!.on('data', (d) => {
      out += d;
      const m = /oidc-as listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1]!);
      }
    });
  });
  return { issuer, stop: () => proc.kill('SIGTERM') };
}

async function machineToken(issuer: string, resource: string): Promise<string> {
  const res = await fetch(`${issuer}/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from('machine:machine-secret').toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials', resource, scope: 'tasks' }),
  });
  const body = (await res.json()) as { access_token?: string; error?: string };
  if (!body.access_token) throw new Error(`no token from ${issuer}: ${body.error}`);
  return body.access_token;
}

export async function startOAuthSides(): Promise<{ sides: OAuthSide[]; stop(): Promise<void> }> {
  const dir = tempDir('oauth');
  const [pJwt, pRaw, pIntro] = [await freePort(), await freePort(), await freePort()];
  const rJwt = `http://127.0.0.1:${pJwt}/mcp`;
  const rRaw = `http://127.0.0.1:${pRaw}/mcp`;
  const rIntro = `http://127.0.0.1:${pIntro}/mcp`;
  const as = await startAuthServer([rJwt, rRaw], rIntro);
  const module = join(ROOT, 'dist', 'fixtures', 'server.js');
  const common = (name: string) => ['--no-poll-limit', '--store', `sqlite:${join(dir, `${name}.db`)}`];
  const served: Served[] = [];
  try {
    served.push(await serve(module, [...common('static'), '--bearer', 'bench-static-token=bench']));
    served.push(await serve(module, [...common('jwt'), '--port', String(pJwt), '--oauth-issuer', as.issuer, '--oauth-resource', rJwt, '--oauth-allow-http']));
    served.push(await serve(module, [...common('raw'), '--port', String(pRaw), '--oauth-issuer', as.issuer, '--oauth-resource', rRaw, '--oauth-allow-http', '--oauth-token-cache-ms', '0']));
    served.push(
      await serve(module, [...common('intro'), '--port', String(pIntro), '--oauth-issuer', as.issuer, '--oauth-resource', rIntro, '--oauth-allow-http', '--oauth-introspection-client-id', 'rs'], {
        OUTLAST_OAUTH_INTROSPECTION_SECRET: 'rs-secret',
      }),
    );
    const tokens = ['bench-static-token', await machineToken(as.issuer, rJwt), await machineToken(as.issuer, rRaw), await machineToken(as.issuer, rIntro)];
    const names = ['static', 'jwt', 'jwt-nocache', 'intro'] as const;
    const sides: OAuthSide[] = [];
    for (let i = 0; i < names.length; i++) {
      const call = toolCall('failing_job');
      call.headers.authorization = `Bearer ${tokens[i]}`;
      const r = await send(served[i]!.url, call);
      const taskId = r.json?.result?.taskId as string | undefined;
      if (!taskId) throw new Error(`${names[i]}: no task created (${r.status} ${r.text.slice(0, 200)})`);
      sides.push({ name: names[i]!, url: served[i]!.url, token: tokens[i]!, taskId });
    }
    return {
      sides,
      async stop() {
        for (const s of served) await s.stop();
        as.stop();
      },
    };
  } catch (e) {
    for (const s of served) await s.stop();
    as.stop();
    throw e;
  }
}
