export * from './runtime.js';
export * from './context.js';
export * from './poll.js';
export { validateInputResponses } from './input.js';
export { RuntimeTelemetry, MCP_BUCKETS } from './telemetry.js';
