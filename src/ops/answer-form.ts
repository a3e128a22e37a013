/** The MCP elicitation schema subset (string with formats and lengths, number/integer with ranges, boolean, enum
 *  with titles, required) as an HTML form, and the posted form read back into content, checked as the schema says. */
import type { JsonObject } from '../protocol/index.js';

export function escapeHtml(s: unknown): string {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

interface Prop {
  type?: string;
  title?: string;
  description?: string;
  format?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  enum?: unknown[];
  enumNames?: string[];
  oneOf?: Array<{ const?: unknown; title?: string }>;
  default?: unknown;
}

function propsOf(schema: JsonObject): Array<[string, Prop]> {
  const p = (schema.properties ?? {}) as Record<string, Prop>;
  return Object.entries(p).filter(([, v]) => v && typeof v === 'object');
}

function choicesOf(p: Prop): Array<{ value: string; label: string }> | undefined {
  if (Array.isArray(p.oneOf)) return p.oneOf.map((o) => ({ value: String(o.const), label: String(o.title ?? o.const) }));
  if (Array.isArray(p.enum)) return p.enum.map((v, i) => ({ value: String(v), label: String(p.enumNames?.[i] ?? v) }));
  return undefined;
}

const INPUT_TYPE: Record<string, string> = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' };

/** The form fields for `schema`, with `values` (what was posted) and `errors` per field. */
export function renderFields(schema: JsonObject, values: Record<string, string> = {}, errors: Record<string, string> = {}): string {
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  return propsOf(schema)
    .map(([name, p]) => {
      const id = `f-${escapeHtml(name)}`;
      const label = escapeHtml(p.title ?? name) + (required.has(name) ? ' <span aria-hidden="true">*</span>' : '');
      const help = p.description ? `<p class="help">${escapeHtml(p.description)}</p>` : '';
      const err = errors[name] ? `<p class="error" role="alert">${escapeHtml(errors[name])}</p>` : '';
      const req = required.has(name) ? ' required' : '';
      const v = values[name] ?? (p.default !== undefined ? String(p.default) : '');
      const n = `name="${escapeHtml(name)}" id="${id}"`;
      let input: string;
      const choices = choicesOf(p);
      if (p.type === 'boolean') {
        const checked = values[name] !== undefined ? values[name] === 'true' : p.default === true;
        return `<div class="field check"><input type="checkbox" ${n} value="true"${checked ? ' checked' : ''}><label for="${id}">${label}</label>${help}${err}</div>`;
      } else if (choices) {
        input = `<select ${n}${req}>${required.has(name) ? '' : '<option value=""></option>'}${choices.map((c) => `<option value="${escapeHtml(c.value)}"${c.value === v ? ' selected' : ''}>${escapeHtml(c.label)}</option>`).join('')}</select>`;
      } else if (p.type === 'number' || p.type === 'integer') {
        input = `<input type="number" ${n} value="${escapeHtml(v)}" step="${p.type === 'integer' ? '1' : 'any'}"${p.minimum !== undefined ? ` min="${p.minimum}"` : ''}${p.maximum !== undefined ? ` max="${p.maximum}"` : ''}${req}>`;
      } else {
        const type = INPUT_TYPE[p.format ?? ''] ?? 'text';
        input = `<input type="${type}" ${n} value="${escapeHtml(v)}"${p.minLength !== undefined ? ` minlength="${p.minLength}"` : ''}${p.maxLength !== undefined ? ` maxlength="${p.maxLength}"` : ''}${req}>`;
      }
      return `<div class="field"><label for="${id}">${label}</label>${help}${input}${err}</div>`;
    })
    .join('\n');
}

const FORMATS: Record<string, RegExp> = {
  email: /^[^\s@]+@[^\s@]+\.[^\s@]+$/,
  uri: /^[a-z][a-z0-9+.-]*:\S+$/i,
  date: /^\d{4}-\d{2}-\d{2}$/,
  'date-time': /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?$/,
};

/** The posted form as elicitation content, or the error of each field that does not fit the schema. */
export function readForm(schema: JsonObject, form: URLSearchParams): { content: JsonObject } | { errors: Record<string, string>; values: Record<string, string> } {
  const required = new Set(Array.isArray(schema.required) ? (schema.required as string[]) : []);
  const content: JsonObject = {};
  const errors: Record<string, string> = {};
  const values: Record<string, string> = {};
  for (const [name, p] of propsOf(schema)) {
    const raw = form.get(name);
    if (raw !== null) values[name] = raw;
    if (p.type === 'boolean') {
      if (raw !== null && raw !== 'true') errors[name] = 'must be checked or left unchecked';
      else content[name] = raw === 'true';
      continue;
    }
    if (raw === null || raw === '') {
      if (required.has(name)) errors[name] = 'is required';
      continue;
    }
    const choices = choicesOf(p);
    if (choices) {
      if (!choices.some((c) => c.value === raw)) errors[name] = `must be one of: ${choices.map((c) => c.label).join(', ')}`;
      else content[name] = raw;
    } else if (p.type === 'number' || p.type === 'integer') {
      const x = Number(raw);
      if (!Number.isFinite(x)) errors[name] = 'must be a number';
      else if (p.type === 'integer' && !Number.isInteger(x)) errors[name] = 'must be a whole number';
      else if (p.minimum !== undefined && x < p.minimum) errors[name] = `must be at least ${p.minimum}`;
      else if (p.maximum !== undefined && x > p.maximum) errors[name] = `must be at most ${p.maximum}`;
      else content[name] = x;
    } else {
      if (p.minLength !== undefined && raw.length < p.minLength) errors[name] = `must be at least ${p.minLength} characters`;
      else if (p.maxLength !== undefined && raw.length > p.maxLength) errors[name] = `must be at most ${p.maxLength} characters`;
      else if (p.format && FORMATS[p.format] && !FORMATS[p.format]!.test(raw)) errors[name] = `must be a valid ${p.format}`;
      else content[name] = raw;
    }
  }
  return Object.keys(errors).length ? { errors, values } : { content };
}

/** Checks content given as JSON (outlast_task_answer, the dashboard) against the schema, as the page checks a form. */
export function checkContent(schema: JsonObject, content: unknown): { content: JsonObject } | { errors: Record<string, string> } {
  if (typeof content !== 'object' || content === null || Array.isArray(content)) return { errors: { content: 'must be an object of field values' } };
  const known = new Set(propsOf(schema).map(([n]) => n));
  const form = new URLSearchParams();
  const errors: Record<string, string> = {};
  for (const [k, v] of Object.entries(content as JsonObject)) {
    if (!known.has(k)) errors[k] = 'is not a field of this question';
    else if (typeof v === 'boolean') {
      if (v) form.set(k, 'true');
    } else if (typeof v === 'string' || typeof v === 'number') form.set(k, String(v));
    else errors[k] = 'must be a string, number or boolean';
  }
  for (const [n, p] of propsOf(schema)) {
    const v = (content as JsonObject)[n];
    if (v === undefined) {
      if (Array.isArray(schema.required) && (schema.required as string[]).includes(n)) errors[n] = 'is required';
      continue;
    }
    if (p.type === 'boolean' && typeof v !== 'boolean') errors[n] = 'must be true or false';
    if ((p.type === 'number' || p.type === 'integer') && typeof v !== 'number') errors[n] = 'must be a number';
    if (p.type === 'string' && typeof v !== 'string') errors[n] = 'must be a string';
  }
  if (Object.keys(errors).length) return { errors };
  const read = readForm(schema, form);
  return 'errors' in read ? { errors: read.errors } : read;
}
