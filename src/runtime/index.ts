export * from './runtime.js';
export * from './context.js';
export * from './poll.js';
export { validateInputResponses } from './input.js';
