/**
 * Where OAuth credentials live between runs: one JSON file readable by the user only (0600 in a 0700 folder), keyed
 * by the protected resource and then by the authorization server's issuer (a client id or token from one issuer is
 * never offered to another). Written atomically (temporary file + rename). Never the journal.
 */
import { chmodSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { setTimeout as delay } from 'node:timers/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

export interface IssuerCredentials {
  client?: Record<string, unknown>;
  tokens?: Record<string, unknown>;
}

type FileShape = Record<string, Record<string, IssuerCredentials>>;

/** `$OUTLAST_CREDENTIALS`, else `$XDG_STATE_HOME/outlast/oauth.json` (default `~/.local/state/outlast/oauth.json`). */
export function defaultCredentialsPath(): string {
  if (process.env.OUTLAST_CREDENTIALS) return process.env.OUTLAST_CREDENTIALS;
  const state = process.env.XDG_STATE_HOME || join(homedir(), '.local', 'state');
  return join(state, 'outlast', 'oauth.json');
}

export class CredentialStore {
  constructor(readonly path: string = defaultCredentialsPath()) {}

  private read(): FileShape {
    if (!existsSync(this.path)) return {};
    const mode = statSync(this.path).mode & 0o777;
    // Like ssh: a credentials file others can read is not used until its mode is fixed.
    if (mode & 0o077) throw new Error(`${this.path} is readable by others (mode ${mode.toString(8)}); run chmod 600 ${this.path}`);
    try {
      return JSON.parse(readFileSync(this.path, 'utf8')) as FileShape;
    } catch (e) {
      throw new Error(`${this.path} is not valid JSON (${(e as Error).message}); remove it to sign in again`);
    }
  }

  private write(data: FileShape): void {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const tmp = `${this.path}.${process.pid}.${Date.now()}.tmp`;
    const fd = openSync(tmp, 'wx', 0o600);
    try {
      writeSync(fd, JSON.stringify(data, null, 2));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    chmodSync(tmp, 0o600);
    renameSync(tmp, this.path);
  }

  get(resource: string, issuer: string): IssuerCredentials {
    return this.read()[resource]?.[issuer] ?? {};
  }

  /** The issuer of the most recent tokens for `resource` (what a request starts with before any discovery). */
  latest(resource: string): { issuer: string; entry: IssuerCredentials } | undefined {
    const byIssuer = this.read()[resource] ?? {};
    let best: { issuer: string; entry: IssuerCredentials; at: number } | undefined;
    for (const [issuer, entry] of Object.entries(byIssuer)) {
      const at = Number(entry.tokens?.saved_at ?? 0);
      if (entry.tokens && (!best || at > best.at)) best = { issuer, entry, at };
    }
    return best && { issuer: best.issuer, entry: best.entry };
  }

  update(resource: string, issuer: string, change: (e: IssuerCredentials) => IssuerCredentials): void {
    const data = this.read();
    const next = change(data[resource]?.[issuer] ?? {});
    data[resource] = { ...data[resource], [issuer]: next };
    this.write(data);
  }

  /**
   * Runs `fn` holding the store's lock file (O_EXCL), so two processes never refresh one rotated refresh token at
   * once. A lock older than `staleMs` is taken over (its holder died); after `waitMs` `fn` runs anyway.
   */
  async withLock<T>(fn: () => Promise<T>, waitMs = 15_000, staleMs = 60_000): Promise<T> {
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const lock = `${this.path}.lock`;
    let fd: number | undefined;
    for (const deadline = Date.now() + waitMs; fd === undefined && Date.now() < deadline; ) {
      try {
        fd = openSync(lock, 'wx', 0o600);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        try {
          if (Date.now() - statSync(lock).mtimeMs > staleMs) unlinkSync(lock);
        } catch {
          /* released meanwhile */
        }
        await delay(50);
      }
    }
    try {
      return await fn();
    } finally {
      if (fd !== undefined) {
        closeSync(fd);
        try {
          unlinkSync(lock);
        } catch {
          /* already gone */
        }
      }
    }
  }

  /** Forgets everything stored for `resource` (logout). Returns whether there was anything. */
  forget(resource: string): boolean {
    const data = this.read();
    if (!(resource in data)) return false;
    delete data[resource];
    this.write(data);
    return true;
  }
}
