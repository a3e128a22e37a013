/**
 * Who a verified access token speaks for. A person is the issuer plus a subject claim (`sub` by default), never the
 * OAuth client: one hosted client serves many people. A token with no person behind it (client credentials: RFC 9068
 * §2.2 puts the client id in `sub`) is its own principal, in a namespace of its own so it never equals a person.
 */
export type PrincipalKind = 'user' | 'client';

export interface TokenPrincipal {
  principal: string;
  kind: PrincipalKind;
  subject: string;
}

/** `oauth:<iss>#<subject>` for a person, `oauth-client:<iss>#<client_id>` for a machine; a string says why neither. */
export function principalOfClaims(issuer: string, claims: Record<string, unknown>, claim = 'sub', opts: { subjectOptional?: boolean } = {}): TokenPrincipal | string {
  const subject = claims[claim];
  const clientId = typeof claims.client_id === 'string' ? claims.client_id : typeof claims.azp === 'string' ? claims.azp : undefined;
  // RFC 7662 makes `sub` optional: an introspected token with a client and no subject is a machine's (RFC 9068
  // requires `sub` in a JWT, so there it is refused).
  if (opts.subjectOptional && claim === 'sub' && subject === undefined && clientId !== undefined && claims.username === undefined) {
    return { principal: `oauth-client:${issuer}#${clientId}`, kind: 'client', subject: clientId };
  }
  if (typeof subject !== 'string' || subject === '') return `Token has no "${claim}" claim to name its principal`;
  // An RFC 8414 issuer has no fragment, so '#' separates issuer and subject unambiguously.
  if (claim === 'sub' && clientId !== undefined && subject === clientId) return { principal: `oauth-client:${issuer}#${clientId}`, kind: 'client', subject };
  return { principal: `oauth:${issuer}#${subject}`, kind: 'user', subject };
}
