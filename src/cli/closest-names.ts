/**
 * The names closest to one that was not found (`outlast call URL nosuch`): the same name in another case, names that
 * start with it or end with it (a gateway serves `memory__create_entities` for `create_entities`), then names a few
 * edits away (Levenshtein distance up to a third of the name, at least 2).
 */

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}

/** Up to `max` of `names` closest to `wanted`, closest first; none when nothing is near. */
export function closestNames(wanted: string, names: readonly string[], max = 3): string[] {
  const w = wanted.toLowerCase();
  const limit = Math.max(2, Math.floor(w.length / 3));
  const scored: Array<{ name: string; score: number }> = [];
  for (const name of new Set(names)) {
    const n = name.toLowerCase();
    let score: number;
    if (n === w) score = 0;
    else if (w.length >= 2 && (n.startsWith(w) || n.endsWith(`__${w}`) || w.startsWith(n))) score = 1 + Math.abs(n.length - w.length) / 100;
    else {
      const d = editDistance(w, n);
      if (d > limit) continue;
      score = 2 + d;
    }
    scored.push({ name, score });
  }
  return scored.sort((a, b) => a.score - b.score || a.name.localeCompare(b.name)).slice(0, max).map((s) => s.name);
}
