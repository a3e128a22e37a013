/**
 * A server whose tool asks a sampling question, for sampling on the answer page: `draft_reply {topic}` (durable, so
 * its wait parks) asks for a model's reply (system prompt, three messages, one with an image, maxTokens, model
 * preferences) with a deadline of ten minutes, and completes with the CreateMessageResult it got.
 */
import * as z from 'zod';
import { defineServer } from '../src/server/module/module.js';

/** A 1×1 PNG: content the page names and never renders. */
const PIXEL = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';

export default defineServer({
  info: { name: 'support-drafts', version: '1.0.0' },
  handles: true,
  setup(outlast) {
    outlast.tool(
      'draft_reply',
      { description: 'Drafts a reply to a customer with a model the client provides.', inputSchema: { topic: z.string() }, policy: 'always', durable: true },
      async ({ topic }, ctx) => {
        const { draft } = await ctx.input(
          {
            draft: {
              method: 'sampling/createMessage',
              params: {
                systemPrompt: 'You write short, kind replies for the support desk.',
                messages: [
                  { role: 'user', content: { type: 'text', text: `Draft a reply about: ${topic}` } },
                  { role: 'assistant', content: { type: 'text', text: 'Which tone should it have?' } },
                  { role: 'user', content: [{ type: 'text', text: 'Friendly, and mention the photo.' }, { type: 'image', data: PIXEL, mimeType: 'image/png' }] },
                ],
                maxTokens: 300,
                modelPreferences: { hints: [{ name: 'claude-sonnet' }], intelligencePriority: 0.8 },
              },
            },
          },
          { timeoutMs: 600_000 },
        );
        return { content: [{ type: 'text' as const, text: `Draft received: ${JSON.stringify(draft)}` }] };
      },
    );
  },
});
