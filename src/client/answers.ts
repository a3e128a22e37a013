/**
 * Prepared answers for form elicitations (what `outlast call --answers JSON` uses without a terminal).
 *
 * An answer is found by the input request's key, or by the form's field names:
 *   {"confirm": {"confirm": true}}                  by key: the form's content
 *   {"confirm": {"action": "decline"}}              by key: a whole ElicitResult
 *   {"approval": true}                              by key, when the form has exactly one field
 *   {"approve": true, "reason": "ok"}               by field: every required field of the form present
 */
import type { JsonObject } from '../protocol/index.js';
import type { ElicitationHandler } from './task-client.js';

export type Answers = Record<string, unknown>;

/** Parses `--answers`; throws an Error that says what is wrong. */
export function answersFromJson(text: string): Answers {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`--answers is not valid JSON (${(e as Error).message}); expected an object such as '{"confirm": true}'`);
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw new Error(`--answers must be a JSON object mapping input keys or form fields to answers, such as '{"confirm": true}'`);
  }
  return v as Answers;
}

interface FieldSchema {
  type?: string;
  enum?: unknown[];
  oneOf?: Array<{ const?: unknown }>;
  items?: { enum?: unknown[] };
}

export interface FormSchema {
  properties?: Record<string, FieldSchema>;
  required?: string[];
}

export type Resolution = { response: JsonObject } | { missing: string[] } | { error: string };

function checkField(name: string, schema: FieldSchema | undefined, value: unknown): string | undefined {
  if (!schema) return `the form has no field "${name}"`;
  const t = schema.type;
  const is =
    t === 'boolean' ? typeof value === 'boolean'
    : t === 'number' ? typeof value === 'number'
    : t === 'integer' ? Number.isInteger(value)
    : t === 'string' ? typeof value === 'string'
    : t === 'array' ? Array.isArray(value) && value.every((x) => typeof x === 'string')
    : true;
  if (!is) return `field "${name}" must be ${t === 'array' ? 'an array of strings' : `a ${t}`}, got ${JSON.stringify(value)}`;
  const allowed = schema.enum ?? schema.oneOf?.map((o) => o.const);
  if (allowed && !allowed.includes(value)) return `field "${name}" must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}, got ${JSON.stringify(value)}`;
  return undefined;
}

function checkContent(schema: FormSchema, content: Record<string, unknown>): string | undefined {
  for (const [k, v] of Object.entries(content)) {
    const err = checkField(k, schema.properties?.[k], v);
    if (err) return err;
  }
  const missing = (schema.required ?? []).filter((r) => content[r] === undefined);
  return missing.length ? `missing required field(s) ${missing.join(', ')}` : undefined;
}

/** Finds the answer to one form elicitation (`params` of `elicitation/create`) in `answers`. */
export function resolveAnswer(answers: Answers, key: string, params: JsonObject): Resolution {
  const schema = (params.requestedSchema ?? {}) as FormSchema;
  const fields = Object.keys(schema.properties ?? {});
  const byKey = answers[key];
  if (byKey !== undefined) {
    if (byKey !== null && typeof byKey === 'object' && !Array.isArray(byKey)) {
      const o = byKey as Record<string, unknown>;
      if (typeof o.action === 'string') {
        if (!['accept', 'decline', 'cancel'].includes(o.action)) return { error: `answer "${key}": action must be accept, decline or cancel` };
        if (o.action === 'accept') {
          const content = (o.content ?? {}) as Record<string, unknown>;
          const err = checkContent(schema, content);
          if (err) return { error: `answer "${key}": ${err}` };
        }
        return { response: o as JsonObject };
      }
      const err = checkContent(schema, o);
      if (err) return { error: `answer "${key}": ${err}` };
      return { response: { action: 'accept', content: o } };
    }
    if (fields.length === 1) {
      const err = checkField(fields[0]!, schema.properties![fields[0]!], byKey);
      if (err) return { error: `answer "${key}": ${err}` };
      return { response: { action: 'accept', content: { [fields[0]!]: byKey } } };
    }
    return { error: `answer "${key}" must be an object of the form's fields (${fields.join(', ')})` };
  }
  const content: Record<string, unknown> = {};
  for (const f of fields) if (answers[f] !== undefined) content[f] = answers[f];
  const required = schema.required ?? fields;
  const missing = required.filter((r) => content[r] === undefined);
  if (Object.keys(content).length === 0 || missing.length) return { missing: missing.length ? missing : fields };
  const err = checkContent(schema, content);
  if (err) return { error: `answer for "${key}": ${err}` };
  return { response: { action: 'accept', content } };
}

/** An elicitation handler answering from prepared answers; rejects when an answer is missing or malformed. */
export function elicitationFromAnswers(answers: Answers): ElicitationHandler {
  return async (params, ctx) => {
    if ((params as { mode?: string }).mode === 'url') throw new Error(`input "${ctx.key}" is a URL elicitation; prepared answers cover forms only`);
    const r = resolveAnswer(answers, ctx.key, params);
    if ('response' in r) return r.response;
    if ('error' in r) throw new Error(`--answers: ${r.error}`);
    throw new Error(`--answers has no answer for input "${ctx.key}" (fields ${r.missing.join(', ')})`);
  };
}
