/**
 * Metric labels from what a caller sends: a JSON-RPC method or a tool name becomes a label only when the server knows
 * it (a method it serves on either wire, a tool it registered); anything else is counted as one `other`, so no caller
 * can add series to /metrics (each new label value is a new series, kept for the life of the process).
 */

import { OTHER_LABEL } from '../../runtime/telemetry.js';

export { OTHER_LABEL };

/** The JSON-RPC methods a client sends an Outlast server, on the 2026-07-28 and 2025-11-25 wires (requests and
 *  notifications; responses carry no method). */
export const KNOWN_METHODS: ReadonlySet<string> = new Set([
  'initialize', 'ping', 'server/discover',
  'tools/list', 'tools/call',
  'resources/list', 'resources/templates/list', 'resources/read', 'resources/subscribe', 'resources/unsubscribe',
  'prompts/list', 'prompts/get', 'completion/complete', 'logging/setLevel',
  'subscriptions/listen',
  'tasks/get', 'tasks/update', 'tasks/cancel', 'tasks/result', 'tasks/list', 'tasks/stream',
  'events/list', 'events/subscribe', 'events/unsubscribe', 'events/poll', 'events/stream',
  'notifications/initialized', 'notifications/cancelled', 'notifications/progress', 'notifications/roots/list_changed',
  'notifications/tasks/status', 'notifications/elicitation/complete',
]);

/** The method as a label: itself when the server serves it, else `other`. */
export function methodLabel(method: string): string {
  return KNOWN_METHODS.has(method) ? method : OTHER_LABEL;
}

/** The tool as a label: itself when `known` (a tool the server registered), else `other`. */
export function toolLabel(name: string, known: (name: string) => boolean): string {
  return known(name) ? name : OTHER_LABEL;
}
