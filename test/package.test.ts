/**
 * What `npm pack` ships: the built code, its sources (so every source map resolves inside the package), bin,
 * README and LICENSE; never tests, benchmarks, fixtures, the demo or data. Every export, the bin and every relative
 * import of the shipped code resolve to a file in the tarball.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { ROOT } from './helpers.js';

interface PackFile {
  path: string;
}

function packed(): string[] {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  const json = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return (JSON.parse(json)[0].files as PackFile[]).map((f) => f.path);
}

describe('the npm package', () => {
  const files = packed();
  const has = new Set(files);

  it('holds the built code, its sources, bin, README and LICENSE', () => {
    for (const f of ['package.json', 'README.md', 'LICENSE', 'bin/outlast.js', 'dist/src/index.js', 'src/index.ts']) assert.ok(has.has(f), `${f} is not packed`);
    assert.match(readFileSync(join(ROOT, 'LICENSE'), 'utf8'), /^MIT License\n\nCopyright \(c\) \d{4} Outlast contributors\n/);
    assert.equal(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).license, 'MIT');
  });

  it('holds no tests, benchmarks, fixtures, demo or data', () => {
    const stray = files.filter((f) => /^(test|bench|fixtures|demo|docs|\.ci)\//.test(f) || /^dist\/(?!src\/)/.test(f) || /\.(db|db-wal|db-shm|tgz|log)$/.test(f));
    assert.deepEqual(stray, []);
  });

  it('every source map points at a file in the package', () => {
    const maps = files.filter((f) => f.endsWith('.map'));
    assert.ok(maps.length > 50, `only ${maps.length} maps`);
    const missing: string[] = [];
    for (const m of maps) {
      const map = JSON.parse(readFileSync(join(ROOT, m), 'utf8')) as { sources: string[]; sourceRoot?: string };
      for (const s of map.sources) {
        const target = posix.normalize(posix.join(posix.dirname(m), map.sourceRoot ?? '', s));
        if (!has.has(target)) missing.push(`${m} -> ${target}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  it('every export, the bin and every relative import of the shipped code resolve inside the package', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    const missing: string[] = [];
    for (const [name, target] of Object.entries(pkg.exports as Record<string, Record<string, string>>))
      for (const t of Object.values(target)) if (!has.has(posix.normalize(t))) missing.push(`export ${name}: ${t}`);
    for (const b of Object.values(pkg.bin as Record<string, string>)) if (!has.has(posix.normalize(b))) missing.push(`bin ${b}`);
    for (const f of files.filter((p) => p.endsWith('.js'))) {
      const text = readFileSync(join(ROOT, f), 'utf8');
      for (const m of text.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) {
        const target = posix.normalize(posix.join(dirname(f), m[1]!));
        if (!has.has(target)) missing.push(`${f} imports ${m[1]} (${target})`);
      }
    }
    assert.deepEqual(missing, []);
  });
});
