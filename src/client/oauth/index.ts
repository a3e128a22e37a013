export { oauthFetch, OAuthAuthorizationError, type InteractiveOAuthProvider } from './oauth-fetch.js';
export { LoopbackOAuthProvider, type LoopbackOAuthOptions } from './loopback-provider.js';
export { CredentialStore, defaultCredentialsPath, type IssuerCredentials } from './credential-store.js';
