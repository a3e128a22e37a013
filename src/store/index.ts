export * from './types.js';
export * from './local-bus.js';
export * from './remote-bus.js';
