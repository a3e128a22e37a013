/**
 * The task methods of each protocol generation, as functions of the runtime: what `tasks/get` and the others do
 * once a request has passed its era's checks. Both ways in serve them from here: the SDK's handlers
 * (`Outlast.attach`) and the direct path of the HTTP front (`direct.ts`), so the two cannot drift apart.
 */
import { ErrorCode, TaskProtocolError, declaresTasks, missingTasksCapability, type JsonObject } from '../../protocol/index.js';
import type { TaskRuntime } from '../../runtime/runtime.js';

/** One task-method request after its era's envelope checks. */
export interface TaskMethodCall {
  /** The request's params (the task id is `params.taskId`). */
  params: Record<string, unknown>;
  /** This request's declared client capabilities (2026-07-28: `_meta["io.modelcontextprotocol/clientCapabilities"]`). */
  clientCapabilities: unknown;
  principal: string;
  /** Over HTTP without credentials or a session: every such caller has this principal, so it reaches a task by its id
   *  and is shown no list. */
  sharedPrincipal?: boolean;
  /** `params.inputResponses` split as the SDK splits it: the plain response objects, by key (undefined when absent). */
  inputResponses: Record<string, unknown> | undefined;
  /** Keys of `params.inputResponses` whose value was not a plain response object (a string, array or `{method, result}`). */
  droppedInputResponseKeys: readonly string[];
}

/** A task method: its result (without the era's stamping, such as `_meta` server info), or a TaskProtocolError. */
export type TaskMethod = (runtime: TaskRuntime, call: TaskMethodCall) => Promise<JsonObject>;

/** The -32021 gate comes before anything that reads the id, so an undeclared client learns nothing about tasks. */
function requireTasksExtension(call: TaskMethodCall): void {
  if (!declaresTasks(call.clientCapabilities)) throw missingTasksCapability();
}

/** 2026-07-28 (`io.modelcontextprotocol/tasks`): every result is `resultType: "complete"`. */
const MODERN: Record<'tasks/get' | 'tasks/update' | 'tasks/cancel', TaskMethod> = {
  async 'tasks/get'(runtime, call) {
    requireTasksExtension(call);
    return { resultType: 'complete', ...(await runtime.getTask(call.params.taskId, call.principal)) };
  },
  async 'tasks/update'(runtime, call) {
    requireTasksExtension(call);
    if (call.droppedInputResponseKeys.length > 0) {
      const keys = call.droppedInputResponseKeys.map((k) => `"${k}"`).join(', ');
      throw new TaskProtocolError(ErrorCode.InvalidParams, `Invalid inputResponses: the response for ${keys} must be a plain response object (not a string, array or {method, result} wrapper)`);
    }
    if (call.inputResponses === undefined) {
      throw new TaskProtocolError(ErrorCode.InvalidParams, 'tasks/update needs params.inputResponses: an object mapping input request keys to responses');
    }
    await runtime.updateTask(call.params.taskId, call.principal, call.inputResponses);
    return { resultType: 'complete' };
  },
  async 'tasks/cancel'(runtime, call) {
    requireTasksExtension(call);
    await runtime.cancelTask(call.params.taskId, call.principal);
    return { resultType: 'complete' };
  },
};

/**
 * Era → method → task method. `modern` is 2026-07-28. The 2025-11-25 generation (`tasks/get`, `tasks/list`,
 * `tasks/cancel`, with that era's result shapes) goes in as `legacy`; the direct path serves a row here as soon
 * as its era is known to `direct.ts`.
 */
export const TASK_METHODS: { modern: typeof MODERN; legacy?: Record<string, TaskMethod> } = { modern: MODERN };

export type TaskEra = keyof typeof TASK_METHODS;
