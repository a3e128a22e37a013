/** What `events/list` answers: the events this server offers, their arguments and payloads as JSON Schema. */
import { TASK_FINISHED, TASK_INPUT_REQUIRED, TASK_STATUS } from '../../store/events.js';
import { TASK_OUTPUT_DESCRIPTOR } from './task-output.js';

const ARGUMENTS_SCHEMA = (needsTask: boolean) => ({
  type: 'object',
  properties: {
    taskId: { type: 'string', maxLength: 256, description: needsTask ? 'The task to follow (one of yours).' : 'Only this task (omit for all your tasks).' },
    ...(needsTask ? {} : { tool: { type: 'string', maxLength: 256, description: 'Only tasks of this tool.' } }),
  },
  ...(needsTask ? { required: ['taskId'] } : {}),
  additionalProperties: false,
});

const PAYLOAD_SCHEMA = {
  type: 'object',
  properties: {
    taskId: { type: 'string' },
    tool: { type: 'string' },
    status: { type: 'string', enum: ['working', 'input_required', 'completed', 'failed', 'cancelled'] },
    statusMessage: { type: 'string' },
    lastUpdatedAt: { type: 'string', format: 'date-time' },
    createdAt: { type: 'string', format: 'date-time' },
    ttl: { type: 'number' },
    result: { type: 'object', description: 'The tool result (completed), when the event fits 256 KiB.' },
    error: { type: 'object', description: 'The JSON-RPC error (failed), when the event fits 256 KiB.' },
    resultOmitted: { type: 'string', description: 'Set when the result was too large: fetch it with tasks/get.' },
    inputRequests: { type: 'object', description: 'input_required: what is asked, by key (answer with tasks/update).' },
  },
  required: ['taskId', 'tool', 'status', 'lastUpdatedAt'],
};

export const EVENT_DESCRIPTORS = [
  { name: TASK_FINISHED, description: 'A task of yours finished: completed, failed or cancelled (the tasks/get view).', delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(false), payloadSchema: PAYLOAD_SCHEMA },
  { name: TASK_INPUT_REQUIRED, description: 'A task of yours needs input (the questions; answer with tasks/update).', delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(false), payloadSchema: PAYLOAD_SCHEMA },
  { name: TASK_STATUS, description: "Every status change of one task of yours (needs taskId).", delivery: ['poll', 'push', 'webhook'], inputSchema: ARGUMENTS_SCHEMA(true), payloadSchema: PAYLOAD_SCHEMA },
  TASK_OUTPUT_DESCRIPTOR,
];

