/**
 * A 2026 client (TaskClient, polling) whose person answers each elicitation late, as people do: after `afterMs`,
 * accepting with `content`. `asked` is the last question it was shown.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { TaskClient } from '../src/client/index.js';

export function lateAnswerer(url: string, content: Record<string, string | number | boolean>, afterMs: number): { client: TaskClient; readonly asked: Record<string, any> | undefined } {
  let asked: Record<string, any> | undefined;
  const client = new TaskClient({
    url,
    status: 'poll',
    elicitation: async (params) => {
      asked = params;
      await sleep(afterMs);
      return { action: 'accept', content };
    },
  });
  return {
    client,
    get asked() {
      return asked;
    },
  };
}
