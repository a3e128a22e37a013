/**
 * A real build of the release before the newest migration, for the upgrade tests: the commit on HEAD's first-parent
 * line just before that migration appeared, exported with `git archive` into a temporary folder (no worktree left
 * behind), compiled with this checkout's node_modules and TypeScript, and kept there by commit, so a test file's run
 * builds it once and later runs reuse it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

export interface PreviousBuild {
  /** The commit built. */
  commit: string;
  /** Its `bin/outlast.js` and fixture server. */
  bin: string;
  fixtures: string;
}

const git = (...args: string[]) => execFileSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' }).trim();

/** Whether migration `version` is defined at `commit` (a literal `version: N,` or a `…_MIGRATION = N;` constant). */
function hasMigration(commit: string, version: number): boolean {
  const r = spawnSync('git', ['-C', ROOT, 'grep', '-q', '-E', `(version: ${version},|_MIGRATION = ${version};)`, commit, '--', 'src/store'], { stdio: 'ignore' });
  return r.status === 0;
}

/** The newest commit of HEAD's first-parent history that does not have migration `version` yet. */
export function commitBefore(version: number): string {
  const line = git('rev-list', '--first-parent', '--max-count=500', 'HEAD').split('\n');
  if (!hasMigration(line[0]!, version)) throw new Error(`HEAD does not define migration ${version}`);
  const before = line.find((c) => !hasMigration(c, version));
  if (!before) throw new Error(`no commit in the last 500 of HEAD's history lacks migration ${version}`);
  return before;
}

/** The build of `commit` (made once, then reused from the temporary folder). */
export function buildOf(commit: string): PreviousBuild {
  const base = join(tmpdir(), 'outlast-previous-builds');
  const dir = join(base, commit);
  const built = { commit, bin: join(dir, 'bin', 'outlast.js'), fixtures: join(dir, 'dist', 'fixtures', 'server.js') };
  if (existsSync(join(dir, '.built'))) {
    // Built by another checkout (an earlier clean clone, since removed): its node_modules link may lead nowhere now.
    if (!existsSync(join(dir, 'node_modules'))) relink(join(dir, 'node_modules'));
    return built;
  }
  mkdirSync(base, { recursive: true });
  const staging = mkdtempSync(join(base, `${commit.slice(0, 12)}-`));
  try {
    execFileSync('sh', ['-c', `git -C "${ROOT}" archive --format=tar ${commit} | tar -x -C "${staging}"`], { stdio: 'pipe' });
    symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(staging, 'node_modules'));
    execFileSync(process.execPath, [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', join(staging, 'tsconfig.json')], { stdio: 'pipe', cwd: staging });
    writeFileSync(join(staging, '.built'), `${commit}\n`);
    try {
      renameSync(staging, dir);
    } catch {
      // Another run built it meanwhile: theirs is used.
      rmSync(staging, { recursive: true, force: true });
    }
  } catch (e) {
    rmSync(staging, { recursive: true, force: true });
    const out = (e as { stdout?: Buffer }).stdout?.toString() ?? '';
    throw new Error(`could not build ${commit}: ${(e as Error).message}\n${out.slice(0, 2000)}`);
  }
  return built;
}

/** Points a build's node_modules at this checkout's (a file running beside may have done it already). */
function relink(link: string): void {
  rmSync(link, { force: true });
  try {
    symlinkSync(realpathSync(join(ROOT, 'node_modules')), link);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
}

/** The build of the release before the newest PostgreSQL migration this checkout has. */
export function previousBuild(newest: number): PreviousBuild {
  return buildOf(commitBefore(newest));
}


