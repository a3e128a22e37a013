/** What an HTTP tap (gateway-upstreams.ts `httptap`) recorded: the request bodies that reached an upstream, in order,
 *  with when (epoch ms). */
import { existsSync, readFileSync } from 'node:fs';

export function reached(log: string): Array<{ at: number; msg: Record<string, any> }> {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8').split('\n').flatMap((l) => {
    const m = /^(\d+) > (.*)$/.exec(l);
    if (!m) return [];
    try {
      return [{ at: Number(m[1]), msg: JSON.parse(m[2]!) }];
    } catch {
      return [];
    }
  });
}
