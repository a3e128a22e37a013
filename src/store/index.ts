export * from './types.js';
export * from './local-bus.js';
