/**
 * Code blocks of README.md and docs/ that claim to run. The convention: a block that runs is preceded by the line
 * `<!-- doc-test: NAME -->` (NAME unique in its file); the doc tests, and any test that runs a block itself (an
 * adapter page's examples, say), read it from here so the text a user copies is the text that was run.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers.js';

export interface DocBlock {
  /** The file, relative to the repository root. */
  file: string;
  name: string;
  /** The fence's info string, e.g. `ts`, `sh`, `js title=server.mjs`. */
  info: string;
  code: string;
  /** 1-based line of the opening fence. */
  line: number;
}

const MARKER = /^<!--\s*doc-test:\s*([\w.-]+)\s*-->\s*$/;
const FENCE = /^(\s*)(```+|~~~+)\s*(.*)$/;

/** Every marked block of one file, in order. A marker not followed by a fence is an error, not a silent skip. */
export function docBlocks(file: string): DocBlock[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: DocBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = MARKER.exec(lines[i]!);
    if (!m) continue;
    const name = m[1]!;
    const open = FENCE.exec(lines[i + 1] ?? '');
    if (!open) throw new Error(`${file}:${i + 1}: doc-test marker "${name}" is not followed by a code fence`);
    const end = lines.findIndex((l, j) => j > i + 1 && l.trim() === open[2]);
    if (end < 0) throw new Error(`${file}:${i + 2}: the code block of "${name}" is not closed`);
    if (blocks.some((b) => b.name === name)) throw new Error(`${file}:${i + 1}: doc-test name "${name}" is used twice`);
    blocks.push({ file, name, info: open[3]!.trim(), code: lines.slice(i + 2, end).join('\n') + '\n', line: i + 2 });
    i = end;
  }
  return blocks;
}

/** One named block; throws, naming the file, when it is missing. */
export function docBlock(file: string, name: string): DocBlock {
  const block = docBlocks(file).find((b) => b.name === name);
  if (!block) throw new Error(`${file} has no block marked <!-- doc-test: ${name} -->`);
  return block;
}

/** The documentation the doc tests cover: README.md, CONTRIBUTING.md, bench/README.md and every page under docs/. */
export function docFiles(): string[] {
  const files = ['README.md', 'CONTRIBUTING.md', 'bench/README.md'].filter((f) => existsSync(join(ROOT, f)));
  const walk = (dir: string): void => {
    if (!existsSync(join(ROOT, dir))) return;
    for (const e of readdirSync(join(ROOT, dir), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (e.isDirectory()) walk(`${dir}/${e.name}`);
      else if (e.name.endsWith('.md')) files.push(`${dir}/${e.name}`);
    }
  };
  walk('docs');
  return files;
}

/** Every marked block of every documentation file. */
export function allDocBlocks(): DocBlock[] {
  return docFiles().flatMap((f) => docBlocks(f));
}
