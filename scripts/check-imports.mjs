#!/usr/bin/env node
// Fails (exit 1, one line per problem) on an import circle or an upward import between the rooms of src/.
// Usage: node scripts/check-imports.mjs [ROOT]   (ROOT defaults to the src/ beside this script)
// Dependency-free on purpose: it runs before anything is installed or built.
import { readdirSync, readFileSync, statSync, existsSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

// Rooms from top to bottom: a file may import its own room and the rooms below it, never one above.
// The most specific prefix names a file's room; rooms on one line share a rank and may not import each other.
// ops/ (what the server serves operators: dashboard, alerts, metrics, event delivery) and client/ (TaskClient, used by
// the cli and the gateway) share a rank between server/ and runtime/: neither imports the server nor the other.
export const LAYERS = [
  ['index.ts'], // the package root re-exports every room
  ['cli/'],
  ['gateway/'],
  ['server/index.ts'], // the ./server export gathers every room of the server
  ['server/'], // the glue (outlast.ts attaches every wire) and the fronts: front/, stdio/, direct/, module/, …
  // What each client generation adds, below the glue that attaches it: a caller without tasks on a 2025-11-25
  // client is asked its questions through that wire, so no-tasks/ sits above tasks-2025/.
  ['server/no-tasks/'],
  ['server/tasks-2025/'],
  ['server/core/'], // what every wire shares: task methods, principals, question text, the SDK peer check
  ['ops/', 'client/'],
  ['runtime/'],
  ['store/'],
  ['protocol/'],
];

/** Every .ts file under root (no .d.ts), as paths relative to root with '/' separators. */
export function listSources(root) {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(relative(root, path).split(sep).join('/'));
    }
  };
  walk(root);
  return out;
}

/**
 * The text with comments removed and every string or template literal replaced by a numbered token `"N"`, with
 * the literals' contents in `strings`: neither a commented import nor an import written inside a string is one.
 */
export function maskSource(text) {
  const strings = [];
  let code = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    const next = text[i + 1];
    if (c === '/' && next === '/') {
      while (i < text.length && text[i] !== '\n') i++;
    } else if (c === '/' && next === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end < 0 ? text.length : end + 2;
      code += text.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else if (c === "'" || c === '"' || c === '`') {
      let j = i + 1;
      while (j < text.length && text[j] !== c && !(c !== '`' && text[j] === '\n')) j += text[j] === '\\' ? 2 : 1;
      strings.push(text.slice(i + 1, j));
      code += `"${strings.length - 1}"`;
      i = j + 1;
    } else {
      code += c;
      i++;
    }
  }
  return { code, strings };
}

// import x from '…', import type {…} from '…', export {…} from '…', export * from '…' (any line breaks between).
const FROM = /\b(?:import|export)\s[^;"]*?\bfrom\s*"(\d+)"/g;
// import '…' (for its effects only).
const BARE = /\bimport\s*"(\d+)"/g;
// import('…'), also in type positions: typeof import('…').
const DYNAMIC = /\bimport\s*\(\s*"(\d+)"\s*\)/g;

/** The relative specifiers a source text imports, in order of appearance, each once. */
export function relativeSpecifiers(text) {
  const { code, strings } = maskSource(text);
  const found = [];
  for (const re of [FROM, BARE, DYNAMIC]) {
    for (const m of code.matchAll(re)) found.push([m.index, strings[Number(m[1])]]);
  }
  const relative = found.filter(([, s]) => /^\.\.?\//.test(s)).sort((a, b) => a[0] - b[0]);
  return [...new Set(relative.map(([, s]) => s))];
}

/** The source file (relative to root) a specifier of `from` names, or undefined when it names none. */
function resolveSpecifier(root, from, specifier) {
  const target = resolve(root, dirname(from), specifier);
  const candidates = [target.replace(/\.js$/, '.ts'), target + '.ts', join(target, 'index.ts')];
  const hit = candidates.find((c) => existsSync(c) && statSync(c).isFile());
  return hit === undefined ? undefined : relative(root, hit).split(sep).join('/');
}

/** The rank of a file's room (0 = top) and the prefix that named it. */
export function roomOf(file) {
  let best;
  LAYERS.forEach((prefixes, rank) => {
    for (const prefix of prefixes) {
      const match = prefix.endsWith('/') ? file.startsWith(prefix) : file === prefix;
      if (match && (best === undefined || prefix.length > best.prefix.length)) best = { rank, prefix };
    }
  });
  return best;
}

/** Strongly connected components of more than one file (Tarjan), each sorted, in a stable order. */
function circles(graph) {
  let index = 0;
  const stack = [];
  const info = new Map();
  const found = [];
  const visit = (v) => {
    info.set(v, { index, low: index, onStack: true });
    index++;
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!info.has(w)) {
        visit(w);
        info.get(v).low = Math.min(info.get(v).low, info.get(w).low);
      } else if (info.get(w).onStack) {
        info.get(v).low = Math.min(info.get(v).low, info.get(w).index);
      }
    }
    if (info.get(v).low === info.get(v).index) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        info.get(w).onStack = false;
        component.push(w);
      } while (w !== v);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!info.has(v)) visit(v);
  return found.sort((a, b) => a[0].localeCompare(b[0]));
}

/** The import graph of root and the problems in it, one line each. */
export function checkImports(root) {
  const files = listSources(root);
  const graph = new Map();
  const problems = [];
  for (const file of files) {
    const edges = new Set();
    for (const specifier of relativeSpecifiers(readFileSync(join(root, file), 'utf8'))) {
      const target = resolveSpecifier(root, file, specifier);
      if (target === undefined) {
        problems.push(`unresolved: ${file} imports '${specifier}', which names no file under ${root}`);
        continue;
      }
      if (target === file) continue;
      edges.add(target);
      const from = roomOf(file);
      const to = roomOf(target);
      if (from === undefined) problems.push(`no room: ${file} is in no room of LAYERS in scripts/check-imports.mjs`);
      else if (to !== undefined && to.rank < from.rank) {
        problems.push(`upward import: ${file} (${from.prefix}) imports ${target} (${to.prefix}), a room above it`);
      } else if (to !== undefined && to.rank === from.rank && to.prefix !== from.prefix) {
        problems.push(`sideways import: ${file} (${from.prefix}) imports ${target} (${to.prefix}), a room beside it`);
      }
    }
    graph.set(file, [...edges].sort());
  }
  for (const component of circles(graph)) {
    problems.push(`import circle: ${component.join(' <-> ')}`);
  }
  return { files, graph, problems: [...new Set(problems)] };
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'src'));
  const { files, graph, problems } = checkImports(root);
  for (const line of problems) console.log(line);
  const edges = [...graph.values()].reduce((n, e) => n + e.length, 0);
  if (problems.length > 0) {
    console.log(`check-imports: ${problems.length} problem(s) in ${files.length} files, ${edges} imports`);
    process.exit(1);
  }
  console.log(`check-imports: ${files.length} files, ${edges} imports, no circle, none upward`);
}
