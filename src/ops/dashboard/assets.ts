/**
 * The dashboard's two static files, served from memory (no build step). live.js keeps a page current: it listens to
 * the server's event stream and re-fetches the page it shows, swapping only `#live` (at most once a second, never
 * while a form in it is being filled in); without EventSource it polls every 5 s. Pages work without it.
 */
export const LIVE_JS = `(() => {
  'use strict';
  const live = document.getElementById('live');
  const state = document.getElementById('live-state');
  const base = document.body.dataset.base;
  if (!live || !base || !window.fetch) return;
  let busy = false, again = false, last = 0, timer;
  const editing = () => { const a = document.activeElement; return !!(a && a.closest && a.closest('#live form') && a.matches('input, select, textarea')); };
  async function refresh() {
    if (busy) { again = true; return; }
    if (editing()) { timer = setTimeout(refresh, 1000); return; }
    busy = true; last = Date.now();
    try {
      const r = await fetch(location.href, { credentials: 'same-origin', headers: { 'x-outlast-live': '1' } });
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
        const next = doc.getElementById('live');
        const current = document.getElementById('live');
        if (next && current && !editing()) current.replaceWith(document.importNode(next, true));
      }
    } catch (e) { /* the next event retries */ }
    busy = false;
    if (again) { again = false; schedule(); }
  }
  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, Math.max(0, 1000 - (Date.now() - last)));
  }
  function poll() { if (state) state.textContent = 'live (polling)'; setInterval(schedule, 5000); }
  if (!window.EventSource) return poll();
  const es = new EventSource(base + '/events');
  es.onopen = () => { if (state) state.textContent = 'live'; };
  es.onmessage = schedule;
  let failures = 0;
  es.onerror = () => { if (state) state.textContent = 'reconnecting'; if (++failures > 5) { es.close(); poll(); } };
})();
`;

export const STYLE_CSS = `
:root { --fg: #1d2433; --muted: #667085; --line: #e4e7ec; --bg: #f8f9fb; --ok: #067647; --warn: #b54708; --bad: #b42318; --run: #175cd3; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1rem; align-items: center; padding: .6rem 1.2rem; background: #101828; color: #fff; flex-wrap: wrap; }
header a { color: #fff; text-decoration: none; } header nav a { margin-right: .8rem; opacity: .85; }
.brand { font-weight: 600; } .env { background: #344054; padding: .1rem .5rem; border-radius: 4px; font-size: 12px; }
.who { margin-left: auto; opacity: .85; } .live-state { font-size: 12px; opacity: .7; }
main { padding: 1rem 1.2rem; max-width: 1400px; }
h1 { font-size: 20px; margin: .2rem 0 1rem; overflow-wrap: anywhere; } h2 { font-size: 15px; margin: 1.4rem 0 .5rem; }
h1 code { overflow-wrap: anywhere; } input, select, textarea, button { max-width: 100%; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: .35rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; }
.msg { max-width: 40rem; overflow-wrap: anywhere; white-space: pre-wrap; }
.counts { display: flex; gap: .8rem; flex-wrap: wrap; }
.count { display: flex; flex-direction: column; min-width: 8rem; padding: .7rem 1rem; background: #fff; border: 1px solid var(--line); border-radius: 6px; text-decoration: none; color: inherit; }
.count .n { font-size: 24px; font-weight: 600; } .count .label { color: var(--muted); } .count.zero .n { color: var(--muted); font-weight: 400; }
.status { display: inline-block; padding: 0 .45rem; border-radius: 10px; font-size: 12px; background: #eef2f6; }
.s-working, .s-pending { color: var(--run); } .s-input_required { color: var(--warn); } .s-completed, .s-delivered { color: var(--ok); }
.s-failed, .s-unread { color: var(--bad); } .s-cancelled { color: var(--muted); } .s-unsent { color: var(--warn); }
tr.lost td { background: #fef3f2; } .urgent { color: var(--bad); font-weight: 600; }
.empty, .hint { color: var(--muted); } .error { color: var(--bad); } .notice { background: #ecfdf3; padding: .4rem .6rem; }
.note { font-size: 12px; color: var(--muted); border: 1px solid var(--line); border-radius: 4px; padding: 0 .3rem; }
form.inline { display: inline; } .filters, .bulk { margin-bottom: .8rem; } .filters label { margin-right: .8rem; }
.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .2rem 1rem; background: #fff; padding: .8rem; border: 1px solid var(--line); }
.facts dt { color: var(--muted); } .facts dd { margin: 0; overflow-wrap: anywhere; }
.error-first { border-left: 4px solid var(--bad); background: #fff; padding: .3rem .8rem; margin-bottom: 1rem; }
.actions { margin: 1rem 0; display: flex; flex-wrap: wrap; gap: 1rem; } pre { background: #fff; border: 1px solid var(--line); padding: .6rem; overflow: auto; }
.login { display: flex; flex-wrap: wrap; gap: .6rem; align-items: end; }
/* A narrower window: a task's id may break anywhere, so a wide table shrinks to fit instead of running off. */
@media (max-width: 75rem) { .task-id { overflow-wrap: anywhere; } }
/* A phone: each table row becomes a card of "label value" lines (the labels are the cells' data-label, the column
   names), the header's items wrap, and nothing is wider than the screen. */
@media (max-width: 60rem) {
  header { padding: .5rem .8rem; gap: .3rem .8rem; } .who { margin-left: 0; }
  main { padding: .8rem; } .msg { max-width: none; } code { overflow-wrap: anywhere; }
  table.cards, table.cards > tbody, table.cards > tbody > tr, table.cards > tbody > tr > td { display: block; }
  table.cards { border: 0; background: none; }
  table.cards > thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
  table.cards > tbody > tr { background: #fff; border: 1px solid var(--line); border-radius: 6px; margin-bottom: .6rem; padding: .35rem 0; }
  table.cards > tbody > tr > td { display: flow-root; border: 0; padding: .15rem .7rem .15rem 7.6rem; overflow-wrap: anywhere; }
  table.cards > tbody > tr > td::before { content: attr(data-label); float: left; width: 6.6rem; margin-left: -6.9rem; color: var(--muted); font-size: 12px; line-height: 20px; overflow-wrap: normal; }
  table.cards > tbody > tr > td[data-label=""] { padding-left: .7rem; } table.cards > tbody > tr > td:empty { display: none; }
  tr.lost { background: #fef3f2; }
  .facts { grid-template-columns: minmax(0, 8rem) minmax(0, 1fr); gap: .2rem .7rem; }
  .filters label { display: inline-block; margin: 0 .8rem .4rem 0; }
}
`;
