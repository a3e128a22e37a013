/**
 * outlast/client: the requester half of the MCP Tasks extension (durable, resumable, idempotent).
 */
export { TaskClient, TaskCall, type TaskClientOptions, type StartOptions, type CallToolResult, type InputContext, type InputEvent, type ElicitationHandler, type SamplingHandler, type RootsHandler, type TaskCallEvents, type ResumeOptions, type TaskOutputOptions } from './task-client.js';
export { latestOutputSeq, streamOutput, type OutputEvent, type OutputGap, type OutputOptions } from './output.js';
export { Journal, defaultJournalPath, JOURNAL_MIGRATIONS, UNFINISHED_STATES, type JournalEntry, type JournalState, type JournalOptions } from './journal.js';
export { PollingSource, ListenSource, getTask, toDetailedTask, type StatusSource, type StatusNote, type FollowObserver, type PollingOptions, type ListenOptions } from './status.js';
export { RawDispatcher, SPOKEN_VERSIONS, RequestCancelledByServer, type DispatcherOptions, type MessageChannel, type RequestStats, type FetchLike, type ServerRequestHandler } from './transport.js';
export { TaskReceiver, receiverCapabilities, type ReceiverOptions, type ReceiverHandlers, type ReceivedRequestContext, type ReceivedRequestHandler } from './receiver.js';
export { StdioChannel, stdioTarget, parseStdioTarget, type StdioServerOptions, type StdioTarget } from './stdio-transport.js';
export type { ToolDefinition, ToolList, RejectedTool } from './tool-catalog.js';
export { RpcError, TransportError, RateLimitedError, TaskGoneError, TaskFailedError, TaskCancelledError, DetachedError, UnsupportedVersionError, RejectedToolError, OutputGoneError } from './errors.js';
export { answersFromJson, elicitationFromAnswers, type Answers } from './answers.js';
export { verifyWebhook } from '../protocol/webhook.js';
export { generateWebhookSecret, webhookReceiver, type WebhookReceiverOptions, type WebhookEvent, type WebhookSubscription, type SubscribeWebhookOptions } from './events.js';
export { LoopbackOAuthProvider, CredentialStore, defaultCredentialsPath, oauthFetch, OAuthAuthorizationError, type LoopbackOAuthOptions, type InteractiveOAuthProvider } from './oauth/index.js';
