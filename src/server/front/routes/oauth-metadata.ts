/** The protected resource's OAuth metadata (RFC 9728) under /.well-known/, when OAuth is in front. */
import type { OAuthResourceServer } from '../../oauth/index.js';
import type { Route } from '../route.js';

export function oauthMetadataRoute(oauth: OAuthResourceServer): Route {
  return { serve: (request, _extra, pathname) => (pathname.startsWith('/.well-known/') ? oauth.metadata(request.web()) ?? undefined : undefined) };
}
