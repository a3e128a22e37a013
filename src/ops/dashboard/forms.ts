/** What the dashboard reads from a request: list cursors, posted forms (bounded, one content type) and task filters,
 *  each refused with the reason when it is not what a page of ours sends. */
import type { IncomingMessage } from 'node:http';
import type { TaskStatus } from '../../protocol/index.js';
import type { OpsTaskFilter } from '../../store/types.js';
import { STATUSES } from './pages.js';

export function encodeCursor(c: { a: number; b: string }): string {
  return Buffer.from(`${c.a}:${c.b}`).toString('base64url');
}
export function decodeCursor(s: string | null): { a: number; b: string } | undefined {
  if (!s || s.length > 400 || !/^[A-Za-z0-9_-]+$/.test(s)) return undefined;
  const m = /^(\d{1,15}):(.{1,200})$/s.exec(Buffer.from(s, 'base64url').toString('utf8'));
  return m ? { a: Number(m[1]), b: m[2]! } : undefined;
}

export function readForm(req: IncomingMessage, limit = 16_384): Promise<URLSearchParams | 'too-large' | 'bad-type'> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/x-www-form-urlencoded') {
    req.resume();
    return Promise.resolve('bad-type');
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        resolve('too-large');
        req.destroy();
      } else chunks.push(c);
    });
    req.once('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
    req.once('error', reject);
  });
}

/** A filter from query or form fields; anything unexpected is refused with the reason. */
export function filterFrom(p: URLSearchParams, now: number): { filter: OpsTaskFilter; olderThanMin?: string } | string {
  const f: OpsTaskFilter = {};
  const status = p.get('status');
  if (status) {
    if (!STATUSES.includes(status as TaskStatus)) return `Unknown state "${status}"`;
    f.status = status as TaskStatus;
  }
  for (const k of ['tool', 'principal'] as const) {
    const v = p.get(k);
    if (v) {
      if (v.length > 200) return `${k} is too long`;
      f[k] = v;
    }
  }
  if (p.get('unread')) f.unread = true;
  const older = p.get('olderThanMin');
  if (older) {
    const n = Number(older);
    if (!Number.isFinite(n) || n < 0 || n > 10_000_000) return 'Older than must be a number of minutes';
    f.createdBefore = now - Math.round(n * 60_000);
    return { filter: f, olderThanMin: older };
  }
  return { filter: f };
}
