export { createOAuthResourceServer, type OAuthFrontOptions, type OAuthResourceServer } from './resource-server.js';
export { OAuthJwtVerifier, checkIssuer, type IntrospectionCredentials, type TokenVerifierOptions } from './verifier.js';
export { principalOfClaims, type PrincipalKind, type TokenPrincipal } from './principal.js';
