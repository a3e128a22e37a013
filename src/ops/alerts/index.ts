/**
 * Alerts that fire on time and reach someone. A scan (every replica runs it; the store makes each alert once)
 * writes alerts for failures nobody read within the grace and for input waiting past most of its deadline; the
 * sweep and the lease check write theirs with the change itself. Any replica claims due alerts and delivers each as
 * a signed Standard Webhook, retrying with back-off under the same `webhook-id` until a 2xx, and records the outcome.
 */
import { metrics } from '@opentelemetry/api';
import type { Logger } from '../../runtime/types.js';
import type { AlertRecord, NewAlert, TaskStore, WaitingTask } from '../../store/types.js';
import { webhookHeaders, webhookKey } from '../../protocol/webhook.js';
import { newAlertId } from '../../store/ops-rows.js';

export interface WebhookDestination {
  url: string;
  /** `whsec_…` (Standard Webhooks). */
  secret: string;
}

export interface AlertOptions {
  store: TaskStore;
  replicaId: string;
  log: Logger;
  /** Where operator alerts go. Without it they are still recorded (and shown in the dashboard). */
  webhook?: WebhookDestination;
  /** Named destinations callers may ask pushes to (`_meta["outlast/push"]`). */
  pushDestinations?: Record<string, WebhookDestination>;
  /** A failure nobody read for this long alerts. Default 15 min. */
  unreadAfterMs?: number;
  /** Input waiting past this fraction of its deadline alerts. Default 0.8. */
  inputStaleFraction?: number;
  /** Period of the scan and of the delivery loop, ms. Default: a quarter of the grace, between 250 ms and 1 s. */
  everyMs?: number;
  /** First retry after this long; each next one waits four times longer (capped at a day). Default 5000. */
  retryBaseMs?: number;
  /** Attempts before an alert is given up (shown failed). Default 12. */
  maxAttempts?: number;
  /** One attempt's time limit, ms. Default 15 000. */
  timeoutMs?: number;
  /** A link to the dashboard in each alert (e.g. https://ops.example/dashboard). */
  dashboardUrl?: string;
  /** The answer-page link of a waiting question, when answer pages are on: carried by input.requested and
   *  input-stale alerts so a chat or pager integration can forward it. */
  answerLinkOf?: (task: WaitingTask, key: string) => string | undefined;
}

const TYPES: Record<AlertRecord['kind'], string> = {
  'failed-unread': 'outlast.task.failed_unread',
  'input-stale': 'outlast.task.input_stale',
  'input-requested': 'outlast.input.requested',
  'replica-lost': 'outlast.replica.lost',
  'expired-unfinished': 'outlast.task.expired_unfinished',
  'task-status': 'outlast.task.status',
};

const meter = metrics.getMeter('outlast');
const deliveries = meter.createCounter('outlast.alerts', { unit: '{alert}', description: 'Alert and push deliveries, by kind and outcome' });

/** The webhook body of an alert: thin (never arguments or results), under the Standard Webhooks shape. */
export function alertBody(a: AlertRecord, dashboardUrl?: string): string {
  const data: Record<string, unknown> = { alertId: a.alertId, kind: a.kind, message: a.message, ...a.data };
  if (dashboardUrl && a.taskId) data.dashboardUrl = `${dashboardUrl.replace(/\/$/, '')}/tasks/${encodeURIComponent(a.taskId)}`;
  return JSON.stringify({ type: TYPES[a.kind], timestamp: new Date(a.createdAt).toISOString(), data });
}

export class AlertService {
  private readonly o: Required<Pick<AlertOptions, 'unreadAfterMs' | 'inputStaleFraction' | 'retryBaseMs' | 'maxAttempts' | 'timeoutMs'>> & AlertOptions;
  private readonly keys = new Map<string, { url: string; key: Buffer }>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  private readonly inFlight = new Set<AbortController>();
  /** input.requested alerts this process already wrote (or found written): not inserted again every scan. */
  private readonly requested = new Set<string>();

  constructor(options: AlertOptions) {
    this.o = { unreadAfterMs: 15 * 60_000, inputStaleFraction: 0.8, retryBaseMs: 5000, maxAttempts: 12, timeoutMs: 15_000, ...options };
    if (options.webhook) this.keys.set('alerts', { url: checkUrl(options.webhook.url), key: webhookKey(options.webhook.secret) });
    for (const [name, d] of Object.entries(options.pushDestinations ?? {})) {
      if (name === 'alerts') throw new Error('"alerts" is the operator webhook; give the push destination another name');
      this.keys.set(name, { url: checkUrl(d.url), key: webhookKey(d.secret) });
    }
  }

  get everyMs(): number {
    return this.o.everyMs ?? Math.min(1000, Math.max(250, Math.round(this.o.unreadAfterMs / 4)));
  }

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.running = this.tick().finally(() => {
        this.running = undefined;
        if (!this.stopped) this.timer = setTimeout(tick, this.everyMs);
      });
    };
    this.timer = setTimeout(tick, Math.min(this.everyMs, 1000));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    for (const c of this.inFlight) c.abort();
    await this.running?.catch(() => undefined);
  }

  private async tick(): Promise<void> {
    try {
      await this.scan(Date.now());
      await this.deliver(Date.now());
    } catch (e) {
      this.o.log.warn('alerts: could not reach the store; retrying', { error: String(e) });
    }
  }

  /** Writes the alerts that are due now (each once, whichever replica scans first). */
  async scan(now: number): Promise<AlertRecord[]> {
    const { store } = this.o;
    const written = await store.ops.alertUnreadFailures(now - this.o.unreadAfterMs, now, 100);
    const add = async (alert: NewAlert & { taskId: string; tool: string; principal: string }) => {
      if (await store.ops.addAlert(alert)) written.push({ ...alert, state: 'pending', attempts: 0, nextAttemptAt: now, claimedBy: null, lastStatus: null, lastError: null, deliveredAt: null });
    };
    for (const w of await store.ops.waiting(500)) {
      for (const [key, p] of Object.entries(w.inputRequests)) {
        const askedAt = w.inputSince ?? w.createdAt;
        const answerUrl = this.o.answerLinkOf?.(w, key);
        const question = String((p.request.params as { message?: unknown } | undefined)?.message ?? p.request.method);
        // Each new question once, whichever replica scans first (the insert dedupes; this process skips known ones).
        const requestedKey = `input-requested:${w.taskId}:${key}`;
        if (this.o.webhook && !this.requested.has(requestedKey)) {
          this.requested.add(requestedKey);
          if (this.requested.size > 10_000) this.requested.clear();
          await add({
            alertId: newAlertId(),
            dedupeKey: requestedKey,
            kind: 'input-requested',
            taskId: w.taskId,
            tool: w.tool,
            principal: w.principal,
            // The link ends the message: a pager or chat that auto-links it takes nothing after it.
            message: `task ${w.taskId} (${w.tool}) asks "${question.slice(0, 200)}"${answerUrl ? `; answer at ${answerUrl}` : ''}`,
            destination: 'alerts',
            data: { taskId: w.taskId, tool: w.tool, key, question: question.slice(0, 500), deadline: new Date(p.deadline).toISOString(), ...(answerUrl ? { answerUrl } : {}) },
            createdAt: now,
          });
        }
        if (p.deadline <= askedAt || (now - askedAt) / (p.deadline - askedAt) < this.o.inputStaleFraction) continue;
        await add({
          alertId: newAlertId(),
          dedupeKey: `input-stale:${w.taskId}:${key}`,
          kind: 'input-stale' as const,
          taskId: w.taskId,
          tool: w.tool,
          principal: w.principal,
          message: `task ${w.taskId} (${w.tool}) has waited ${Math.round((now - askedAt) / 60_000)} min for input "${key}"; its deadline passes in ${Math.max(0, Math.round((p.deadline - now) / 1000))} s`,
          destination: 'alerts',
          data: { taskId: w.taskId, tool: w.tool, key, question: question.slice(0, 500), deadline: new Date(p.deadline).toISOString(), ...(answerUrl ? { answerUrl } : {}) },
          createdAt: now,
        });
      }
    }
    for (const a of written) this.o.log.warn(`alert: ${a.message}`, { kind: a.kind, taskId: a.taskId, tool: a.tool, principal: a.principal });
    return written;
  }

  /** Claims due alerts for the configured destinations and delivers each (at least once across replicas). */
  async deliver(now: number): Promise<number> {
    if (this.keys.size === 0) return 0;
    const claimMs = this.o.timeoutMs + 5000;
    const claimed = await this.o.store.ops.claimAlerts(this.o.replicaId, [...this.keys.keys()], now, claimMs, 20);
    await Promise.all(claimed.map((a) => this.send(a)));
    return claimed.length;
  }

  private async send(a: AlertRecord): Promise<void> {
    const dest = this.keys.get(a.destination)!;
    const body = alertBody(a, this.o.dashboardUrl);
    const ac = new AbortController();
    this.inFlight.add(ac);
    const timer = setTimeout(() => ac.abort(), this.o.timeoutMs);
    let status: number | null = null;
    let error = '';
    let retryAfterMs: number | undefined;
    try {
      const res = await fetch(dest.url, { method: 'POST', headers: { ...webhookHeaders(dest.key, a.alertId, body), 'user-agent': 'outlast-alerts' }, body, signal: ac.signal, redirect: 'manual' });
      status = res.status;
      await res.body?.cancel().catch(() => undefined);
      const ra = Number(res.headers.get('retry-after'));
      if (Number.isFinite(ra) && ra > 0) retryAfterMs = ra * 1000;
      if (status < 200 || status >= 300) error = `HTTP ${status}`;
    } catch (e) {
      error = ac.signal.aborted ? `no answer within ${this.o.timeoutMs} ms` : String((e as Error).cause ?? (e as Error).message);
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(ac);
    }
    if (this.stopped && !status) return; // shutting down: the claim lapses and another replica retries
    const now = Date.now();
    if (!error && status !== null) {
      await this.o.store.ops.settleAlert(a.alertId, this.o.replicaId, { delivered: true, status, now });
      deliveries.add(1, { 'outlast.alert.kind': a.kind, 'outlast.alert.delivery': 'ok' });
      this.o.log.info('alert delivered', { alertId: a.alertId, kind: a.kind, taskId: a.taskId, destination: a.destination, attempts: a.attempts });
      return;
    }
    // 410 Gone: the receiver asks never to be called again for this (Standard Webhooks).
    const giveUp = status === 410 || a.attempts >= this.o.maxAttempts;
    const backoff = Math.min(86_400_000, this.o.retryBaseMs * 4 ** (a.attempts - 1));
    const retryAt = giveUp ? null : now + Math.max(retryAfterMs ?? 0, Math.round(backoff * (0.8 + Math.random() * 0.4)));
    await this.o.store.ops.settleAlert(a.alertId, this.o.replicaId, { delivered: false, status, error, retryAt, now });
    deliveries.add(1, { 'outlast.alert.kind': a.kind, 'outlast.alert.delivery': 'failed' });
    this.o.log.warn(giveUp ? 'alert delivery given up' : 'alert delivery failed; will retry', { alertId: a.alertId, kind: a.kind, destination: a.destination, attempts: a.attempts, error, ...(retryAt ? { retryInMs: retryAt - now } : {}) });
  }
}

function checkUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`Invalid webhook URL "${url}"`);
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new Error(`Webhook URL "${url}" must be http(s)`);
  return u.toString();
}
