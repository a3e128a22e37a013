/**
 * The documentation as a reader meets it: README.md stays a front door (≤ 250 lines), every relative link of
 * README.md, CONTRIBUTING.md, bench/README.md and docs/ reaches a file of the repository (and a heading of it, for
 * `#anchor`s), nothing points at the team's notes outside the repository, and every block marked
 * `<!-- doc-test: NAME -->` is run by some test (which reads it with docBlock).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { ROOT } from './helpers.js';
import { allDocBlocks, docFiles } from './doc-blocks.js';

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

/** The lines outside code fences, with inline code blanked (a link inside code is an example, not a link). */
function prose(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fence: string | undefined;
  text.split('\n').forEach((l, i) => {
    const f = /^\s*(```+|~~~+)/.exec(l);
    if (f) {
      if (!fence) fence = f[1];
      else if (l.trim().startsWith(fence)) fence = undefined;
      return;
    }
    if (!fence) out.push({ line: i + 1, text: l.replace(/`[^`]*`/g, '``') });
  });
  return out;
}

/** GitHub's anchors for the headings of a Markdown file (lower case, punctuation dropped, spaces as '-', -N for repeats). */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { text: l } of prose(text.replace(/`([^`]*)`/g, '$1'))) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(l);
    if (!h) continue;
    const base = h[1]!.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n ? `${base}-${n}` : base);
  }
  return out;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

function links(file: string): Link[] {
  const found: Link[] = [];
  for (const { line, text } of prose(read(file))) {
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) found.push({ file, line, target: m[1]! });
    for (const m of text.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/g)) found.push({ file, line, target: m[1]! });
  }
  return found;
}

/** Whether git ignores the path (built output, local data): a clone of the repository would not have it. */
const ignored = (rel: string) => spawnSync('git', ['check-ignore', '-q', rel], { cwd: ROOT }).status === 0;

describe('the documentation', () => {
  const files = docFiles();

  it('covers the front door and the pages by audience', () => {
    for (const f of ['README.md', 'CONTRIBUTING.md', 'bench/README.md', 'docs/server-authors.md', 'docs/clients-and-cli.md',
      'docs/deployment.md', 'docs/operations.md', 'docs/configuration.md', 'docs/guarantees.md', 'docs/wire-2025-11-25.md'])
      assert.ok(files.includes(f), `${f} is missing`);
  });

  it('README.md is at most 250 lines', () => {
    const n = read('README.md').split('\n').length - (read('README.md').endsWith('\n') ? 1 : 0);
    assert.ok(n <= 250, `README.md has ${n} lines`);
  });

  it('every relative link resolves to a file of the repository (and its heading)', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const file of files) {
      for (const l of links(file)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(l.target)) continue; // https:, mailto:
        checked++;
        const [path, anchor] = l.target.split('#') as [string, string | undefined];
        const abs = path ? resolve(ROOT, dirname(file), decodeURIComponent(path)) : join(ROOT, file);
        const rel = relative(ROOT, abs);
        const where = `${l.file}:${l.line}: ${l.target}`;
        if (rel.startsWith('..') || /^(node_modules|dist)(\/|$)/.test(rel)) broken.push(`${where} (outside the repository's files)`);
        else if (!existsSync(abs)) broken.push(`${where} (no such file)`);
        else if (ignored(rel)) broken.push(`${where} (a file git ignores: a clone does not have it)`);
        else if (anchor && statSync(abs).isFile() && abs.endsWith('.md') && !anchors(readFileSync(abs, 'utf8')).has(anchor))
          broken.push(`${where} (no heading #${anchor} in ${rel})`);
      }
    }
    assert.ok(checked > 20, `only ${checked} relative links found: is the reader broken?`);
    assert.deepEqual(broken, []);
  });

  it('every page and section the CLI\'s help texts point at exists (docs/FILE.md#heading, README "Section")', () => {
    // `outlast help` prints every command's help, the front's and the client's included.
    const help = spawnSync(process.execPath, [join(ROOT, 'bin', 'outlast.js'), 'help'], { cwd: ROOT, encoding: 'utf8' }).stdout;
    assert.match(help, /outlast serve MODULE/);
    const broken: string[] = [];
    let checked = 0;
    for (const m of help.matchAll(/\b((?:docs\/[\w-]+|README|CONTRIBUTING)\.md)(?:#([\w-]+))?/g)) {
      checked++;
      if (!existsSync(join(ROOT, m[1]!))) broken.push(`${m[0]} (no such file)`);
      else if (m[2] && !anchors(read(m[1]!)).has(m[2])) broken.push(`${m[0]} (no such heading)`);
    }
    // A section named in words: README "Operations", the README's 'Concepts in one screen'.
    for (const m of help.matchAll(/README(?:'s|\.md)? ["']([^"']+)["']/g)) {
      checked++;
      if (!anchors(read('README.md')).has(m[1]!.toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-'))) broken.push(`${m[0]} (no such section in README.md)`);
    }
    assert.ok(checked >= 5, `only ${checked} references found in outlast help`);
    assert.deepEqual(broken, []);
  });

  it("points at nothing outside the repository (the team's notes, their section numbers)", () => {
    const bad: string[] = [];
    for (const file of files)
      read(file).split('\n').forEach((l, i) => {
        if (/\.\.\/shared|sdk-notes|\/work\//.test(l)) bad.push(`${file}:${i + 1}: ${l.trim()}`);
      });
    assert.deepEqual(bad, []);
  });

  it('every block marked to run is run by a test that reads it', () => {
    const tests = readdirSync(join(ROOT, 'test')).filter((f) => f.endsWith('.ts')).map((f) => read(`test/${f}`));
    const blocks = allDocBlocks();
    assert.ok(blocks.length >= 4, 'the README marks its install, quick start, call and output');
    // A test reads a block when it names the file and the block (directly in docBlock(…), or in a list it loops over).
    const orphans = blocks.filter((b) => !tests.some((src) => src.includes(`'${b.file}'`) && src.includes('docBlock(') && src.includes(`'${b.name}'`)));
    assert.deepEqual(orphans.map((b) => `${b.file}:${b.line} ${b.name}`), []);
  });

  it('docs/security.md: every test it names exists in the file it names (each claim names its test)', () => {
    const missing: string[] = [];
    let cited = 0;
    for (const row of read('docs/security.md').split('\n').filter((l) => /^\| .* \| [a-z-]+: "/.test(l))) {
      const claimCell = row.split(' | ').at(-1)!;
      // Cells name tests as `file: "name", "name"; file: "name"`; a name ending in … is a prefix.
      for (const group of claimCell.split(/;\s*/)) {
        const m = /^\|?\s*([a-z-]+): (.*)$/.exec(group.trim());
        if (!m) continue;
        // The source as its test names read (a quote escaped in a single-quoted name unescaped).
        const src = existsSync(join(ROOT, 'test', `${m[1]}.test.ts`)) ? read(`test/${m[1]}.test.ts`).replaceAll("\\'", "'") : '';
        for (const n of m[2]!.matchAll(/"((?:[^"\\]|\\.)*?)"(?=,|\s*\(|\s*\||\s*and|\s*$)/g)) {
          cited++;
          const name = n[1]!.replace(/…$/, '').replace(/: $/, '').trim();
          if (!src.includes(name)) missing.push(`${m[1]}: "${n[1]}"`);
        }
      }
    }
    assert.ok(cited >= 40, `only ${cited} tests cited: is the reader broken?`);
    assert.deepEqual(missing, []);
  });
});
