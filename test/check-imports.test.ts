/**
 * `npm run check:imports` (scripts/check-imports.mjs): the source tree has no import circle and no upward import
 * between rooms; a tree with either fails, naming both files; and the script reads every source file's imports as
 * TypeScript itself does.
 */
import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';
import { ROOT } from './helpers.js';

const SCRIPT = join(ROOT, 'scripts', 'check-imports.mjs');

function check(...args: string[]) {
  const run = spawnSync(process.execPath, [SCRIPT, ...args], { cwd: ROOT, encoding: 'utf8' });
  return { status: run.status, lines: run.stdout.trim().split('\n'), stderr: run.stderr };
}

describe('check:imports', () => {
  it('passes on the source tree', () => {
    const { status, lines, stderr } = check();
    assert.equal(status, 0, lines.join('\n') + stderr);
    assert.match(lines.at(-1)!, /^check-imports: \d+ files, \d+ imports, no circle, none upward$/);
  });

  it('runs from package.json as check:imports', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    assert.equal(pkg.scripts['check:imports'], 'node scripts/check-imports.mjs');
  });

  describe('on a tree with a circle, an upward and a sideways import', () => {
    const root = mkdtempSync(join(tmpdir(), 'outlast-check-imports-'));
    after(() => rmSync(root, { recursive: true, force: true }));
    const write = (file: string, text: string) => {
      mkdirSync(dirname(join(root, file)), { recursive: true });
      writeFileSync(join(root, file), text);
    };
    // The protocol room reaches up into the runtime; two runtime files import each other, one only for a type
    // (spread over lines) and the other through a dynamic import; a commented import and a string are not imports.
    write('protocol/index.ts', "import { b } from '../runtime/b.js';\nexport const a = b;\n");
    write('runtime/b.ts', "import type {\n  C,\n} from './c.js';\nexport const b = 1 as unknown as C;\n");
    write('runtime/c.ts', "export type C = number;\nexport const load = () => import('./b.js');\n// import { x } from './d.js';\n");
    write('runtime/d.ts', "export const text = \"import { c } from './c.js'\";\n");
    write('store/e.ts', "import { b } from '../runtime/b.js';\nexport { b };\n");
    // Rooms of one rank (ops/ and client/) may not import each other.
    write('client/h.ts', 'export const h = 1;\n');
    write('ops/g.ts', "export { h } from '../client/h.js';\n");

    it('fails with one line per problem, naming both files', () => {
      const { status, lines } = check(root);
      assert.equal(status, 1);
      assert.deepEqual(lines, [
        'sideways import: ops/g.ts (ops/) imports client/h.ts (client/), a room beside it',
        'upward import: protocol/index.ts (protocol/) imports runtime/b.ts (runtime/), a room above it',
        'upward import: store/e.ts (store/) imports runtime/b.ts (runtime/), a room above it',
        'import circle: runtime/b.ts <-> runtime/c.ts',
        'check-imports: 4 problem(s) in 7 files, 5 imports',
      ]);
    });

    it('names an import of a file that is not there', () => {
      write('runtime/f.ts', "export * from './missing.js';\n");
      const { status, lines } = check(root);
      assert.equal(status, 1);
      assert.ok(lines.includes(`unresolved: runtime/f.ts imports './missing.js', which names no file under ${root}`), lines.join('\n'));
    });
  });

  it('reads each source file\'s relative imports as TypeScript does', async () => {
    const script = await import(pathToFileURL(SCRIPT).href);
    const src = join(ROOT, 'src');
    const files: string[] = script.listSources(src);
    assert.ok(files.length > 100, `only ${files.length} files under src/`);
    for (const file of files) {
      const text = readFileSync(join(src, file), 'utf8');
      const theirs = ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName).filter((s) => /^\.\.?\//.test(s));
      assert.deepEqual([...script.relativeSpecifiers(text)].sort(), [...new Set(theirs)].sort(), file);
    }
  });
});
