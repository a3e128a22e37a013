/** The answer pages' HTML shell: one inline style pinned by its hash in a CSP that allows no script at all. */
import { createHash } from 'node:crypto';
import { escapeHtml } from '../../../ops/answer-form.js';

const STYLE =
  'body{font:16px/1.5 system-ui,sans-serif;margin:0;padding:1rem;max-width:36rem;margin-inline:auto;color:#111;background:#fff}' +
  'h1{font-size:1.25rem}.field{margin:1rem 0}.field label{display:block;font-weight:600}.check label{display:inline;margin-left:.5rem}' +
  'input[type=text],input[type=email],input[type=url],input[type=number],input[type=date],input[type=datetime-local],select{width:100%;box-sizing:border-box;font-size:1rem;padding:.5rem}' +
  '.help{margin:.25rem 0;color:#444;font-size:.9rem}.error{color:#a00;margin:.25rem 0}.meta{color:#555;font-size:.9rem}' +
  'button{font-size:1rem;padding:.6rem 1.2rem;margin:.5rem .5rem 0 0}' +
  '.asker{display:grid;grid-template-columns:auto 1fr;gap:.2rem .75rem;margin:0 0 1rem;padding:.75rem;background:#f3f4f6;border-radius:.5rem;font-size:.95rem}' +
  '.asker dt{color:#555}.asker dd{margin:0;overflow-wrap:anywhere}.utc{color:#555;white-space:nowrap}.question{font-size:1.1rem;font-weight:500}' +
  'h2{font-size:1rem;margin:1rem 0 .25rem}textarea{width:100%;box-sizing:border-box;font:inherit;padding:.5rem}' +
  '.msg{border-left:3px solid #c7cbd1;padding:.1rem .75rem;margin:.5rem 0}.role{margin:0;color:#555;font-size:.9rem;font-weight:600}' +
  '.text{white-space:pre-wrap;overflow-wrap:anywhere;margin:.25rem 0}.named{color:#555;font-style:italic;margin:.25rem 0}';
const STYLE_HASH = createHash('sha256').update(STYLE).digest('base64');
const CSP = `default-src 'none'; style-src 'sha256-${STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`;


/** `extra`: more headers (Set-Cookie may repeat). */
export function page(status: number, title: string, body: string, extra: HeadersInit = {}): Response {
  const html = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body><h1>${escapeHtml(title)}</h1>${body}</body></html>`;
  const headers = new Headers({
      'content-type': 'text/html; charset=utf-8',
      'content-security-policy': CSP,
      'x-content-type-options': 'nosniff',
      // same-origin, not no-referrer: with no-referrer Chromium posts the form with "Origin: null" (refused by the front).
      'referrer-policy': 'same-origin',
      'cache-control': 'no-store',
      'x-frame-options': 'DENY',
  });
  new Headers(extra).forEach((v, k) => (k === 'set-cookie' ? undefined : headers.set(k, v)));
  for (const c of new Headers(extra).getSetCookie()) headers.append('set-cookie', c);
  return new Response(html, { status, headers });
}

/** A page of one paragraph, and optionally a link (escaped). */
export function notice(status: number, title: string, text: string, o: { link?: { href: string; text: string }; headers?: HeadersInit } = {}): Response {
  const link = o.link ? `<p><a href="${escapeHtml(o.link.href)}">${escapeHtml(o.link.text)}</a></p>` : '';
  return page(status, title, `<p>${escapeHtml(text)}</p>${link}`, o.headers);
}

