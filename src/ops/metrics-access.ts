/**
 * Who may read /metrics: the operators, as on the dashboard. With operator tokens configured a scrape must carry one
 * (`Authorization: Bearer TOKEN`, either role: Prometheus sends it from its scrape config); without any, /metrics is
 * served to whoever reaches a loopback bind (the one local operator) and refused on any other, or it is served on a
 * listener of its own (--metrics-listen HOST:PORT) on an interface the operator names, for a Prometheus that scrapes
 * without credentials on a private network. Never a wildcard address: that would be every interface.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { OperatorAuth, isLoopbackHost, type OperatorTokens } from './dashboard/index.js';

type MetricsHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

function anyToken(tokens: OperatorTokens): boolean {
  return Object.keys(tokens.operators ?? {}).length + Object.keys(tokens.readonly ?? {}).length > 0;
}

/** Throws (one line, naming the flags) when /metrics on the front's `host` would be open to a network without
 *  operator tokens. */
export function checkMetricsExposure(host: string, tokens: OperatorTokens): void {
  if (anyToken(tokens) || isLoopbackHost(host)) return;
  throw new Error(`Refusing to serve /metrics on ${host} without operator tokens: anyone who can reach it could read it and make it grow. Add --operator TOKEN=NAME (or --operator-readonly; Prometheus sends it as a bearer token), serve it on a private interface with --metrics-listen HOST:PORT, or listen on 127.0.0.1`);
}

/** Whether `host` is a wildcard address (every interface). */
export function isWildcardHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === '' || h === '0.0.0.0' || /^[0:]+$/.test(h);
}

/** Throws (one line) when the metrics listener's own host is a wildcard: it serves without credentials. */
export function checkMetricsListen(host: string): void {
  if (!isWildcardHost(host)) return;
  throw new Error(`Refusing --metrics-listen on ${host || 'every interface'}: it serves /metrics without credentials, so it must name one interface (a private address such as 10.0.0.5:9464, or 127.0.0.1:9464); to scrape on a public interface use --metrics with --operator TOKEN=NAME instead`);
}

/** The handler behind the operators' credentials (any configured operator token); without tokens it is served as is
 *  (the exposure check above keeps that to loopback). */
export function operatorsOnly(handler: MetricsHandler, tokens: OperatorTokens): MetricsHandler {
  if (!anyToken(tokens)) return handler;
  const auth = new OperatorAuth(tokens);
  return (req, res) => {
    if (auth.bearer(req)) return handler(req, res);
    res.writeHead(401, { 'content-type': 'text/plain; charset=utf-8', 'www-authenticate': 'Bearer realm="outlast-metrics"', 'cache-control': 'no-store' });
    res.end('/metrics needs an operator token: Authorization: Bearer TOKEN (an --operator or --operator-readonly token)\n');
  };
}
