/**
 * OAuth for the client commands: `outlast login URL`, `outlast logout URL`, and the provider `call` / `resume` /
 * `cancel` use against a protected server (a person signs in through the loopback redirect: the URL is printed, a
 * browser opened only with --open-browser; machines use --client-credentials with $OUTLAST_CLIENT_SECRET). Tokens
 * are kept per server and issuer in the user's state folder (0600), never in the journal.
 */
import { spawn } from 'node:child_process';
import { CredentialStore, LoopbackOAuthProvider } from '../client/oauth/index.js';
import { TaskClient } from '../client/task-client.js';

export const OAUTH_HELP = `OAuth (servers behind an authorization server; see docs/oauth.md):
  outlast login URL [options]       sign in to the MCP server at URL now (stores the tokens)
  outlast logout URL                forget the tokens and client registration stored for URL
  Without --bearer, call / resume / cancel sign in when the server asks (HTTP 401) and reuse stored tokens.
  --open-browser           open the sign-in URL in a browser (default: print it on stderr only)
  --client-id ID           a client registered in advance at the authorization server
                           (its secret, if any, in $OUTLAST_CLIENT_SECRET)
  --client-metadata-url U  this client's Client ID Metadata Document (https), when the server supports them
  --client-credentials     a machine: the client credentials grant with --client-id and $OUTLAST_CLIENT_SECRET
                           (no browser; tokens kept in memory only)
  Credentials file: $OUTLAST_CREDENTIALS, else $XDG_STATE_HOME/outlast/oauth.json (~/.local/state/outlast/oauth.json)
`;

export const OAUTH_OPTIONS = {
  'open-browser': { type: 'boolean' },
  'client-id': { type: 'string' },
  'client-metadata-url': { type: 'string' },
  'client-credentials': { type: 'boolean' },
} as const;

export const OAUTH_STRING_OPTIONS = ['--client-id', '--client-metadata-url'];

export interface OAuthFlagValues {
  'open-browser'?: boolean | undefined;
  'client-id'?: string | undefined;
  'client-metadata-url'?: string | undefined;
  'client-credentials'?: boolean | undefined;
}

/** Opens `url` in the desktop's browser without a shell (the URL is never interpreted by one). */
function openBrowser(url: URL): void {
  const cmd = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer.exe' : 'xdg-open';
  const child = spawn(cmd, [url.href], { stdio: 'ignore', detached: true });
  child.on('error', () => process.stderr.write(`(could not start ${cmd}; open the URL above yourself)\n`));
  child.unref();
}

/** The OAuth provider the CLI gives TaskClient for `url`: it only acts when the server answers 401 / 403. */
export function cliOAuthProvider(url: string, values: OAuthFlagValues): LoopbackOAuthProvider {
  const secret = process.env.OUTLAST_CLIENT_SECRET;
  if (values['client-credentials']) {
    if (!values['client-id'] || !secret) throw new Error('--client-credentials needs --client-id ID and the secret in $OUTLAST_CLIENT_SECRET');
    return new LoopbackOAuthProvider({ serverUrl: url, clientCredentials: true, clientId: values['client-id'], clientSecret: secret });
  }
  return new LoopbackOAuthProvider({
    serverUrl: url,
    store: new CredentialStore(),
    ...(values['client-id'] ? { clientId: values['client-id'], ...(secret ? { clientSecret: secret } : {}) } : {}),
    ...(values['client-metadata-url'] ? { clientMetadataUrl: values['client-metadata-url'] } : {}),
    clientName: 'Outlast CLI',
    onAuthorizationUrl: (u) => {
      process.stderr.write(`To sign in to ${url}, open this URL in a browser:\n  ${u.href}\n`);
      if (values['open-browser']) openBrowser(u);
    },
  });
}

/** `outlast login URL`: signs in now (a fresh sign-in even when tokens are stored), then checks them with tools/list. */
export async function login(url: string, values: OAuthFlagValues): Promise<number> {
  const provider = cliOAuthProvider(url, values);
  provider.invalidateCredentials('tokens');
  const client = new TaskClient({ url, auth: provider, clientInfo: { name: 'outlast-cli', version: '0.1.0' } });
  try {
    const { tools } = await client.listTools();
    process.stderr.write(`Signed in to ${url} (${tools.length} tools).${values['client-credentials'] ? '' : ` Tokens stored in ${new CredentialStore().path}.`}\n`);
    return 0;
  } finally {
    await client.close();
    provider.close();
  }
}

/** `outlast logout URL`: forgets what is stored for URL. */
export function logout(url: string): number {
  const store = new CredentialStore();
  const had = store.forget(new URL(url).href);
  process.stderr.write(had ? `Signed out of ${url}: its tokens and client registration are removed from ${store.path}.\n` : `Nothing stored for ${url} in ${store.path}.\n`);
  return 0;
}
