export { Outlast, defaultPrincipalOf, type OutlastOptions, type OutlastToolConfig, type PreflightInput, type PreflightResult } from './outlast.js';
export { serveHttp, DEFAULT_MAX_BODY_BYTES, type HttpServeOptions, type RunningHttpServer, type ServerFactory } from './http.js';
export { serveOutlastStdio } from './stdio.js';
export type { TaskContext, ToolHandler, ElicitResult, InputOptions, ElicitOptions } from '../runtime/context.js';
export { InputTimeoutError, TaskCancelledError } from '../runtime/context.js';
export { TaskProtocolError } from '../protocol/index.js';
export { defineServer, moduleFactory, type OutlastServerModule } from './module.js';
export { recordDefinitions, type DefinitionSurface, type Definitions } from './definitions.js';
