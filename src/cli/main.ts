/**
 * The `outlast` command.
 *   outlast serve MODULE [--port N] [--host H] [--store sqlite:PATH] [--stdio] [--default-ttl-ms N]
 *                        [--bearer TOKEN=PRINCIPAL]... [tuning flags, see `outlast help`]
 *   outlast gateway --stdio "CMD ARGS" | --http URL | --config FILE [the same front flags]
 */
import { loadServerModule } from '../server/load-module.js';
import { HelpRequested, UsageError, parseCommand } from './usage.js';
import { CLIENT_HELP, call, cancel, loginCommand, logoutCommand, logs, resume, runClientCommand, tasks } from './client-commands.js';
import { dashboardArgs, dashboardCommand, DASHBOARD_HELP } from './dashboard-command.js';
import { FRONT_HELP, FRONT_OPTIONS, runFront } from './front-command.js';
import { GATEWAY_HELP, GATEWAY_OPTIONS, gatewayCommand } from './gateway-command.js';

const SERVE_USAGE = `Usage:
  outlast serve MODULE [options]   serve the tools of MODULE (a JS module whose default export is defineServer({...}))

Options for serve (outlast gateway takes them too, all but --stdio):
  --stdio                  serve on stdin/stdout instead of HTTP
${FRONT_HELP}`;

const HELP = `outlast: durable MCP Tasks (io.modelcontextprotocol/tasks, 2026-07-28)

${SERVE_USAGE}
${GATEWAY_HELP}
${DASHBOARD_HELP}
${CLIENT_HELP}`;

/** What `outlast COMMAND --help` prints. */
const COMMAND_HELP: Record<string, string> = {
  serve: SERVE_USAGE,
  gateway: `${GATEWAY_HELP}
Front options (as for serve):
${FRONT_HELP}`,
  dashboard: DASHBOARD_HELP,
  call: CLIENT_HELP,
  tasks: CLIENT_HELP,
  resume: CLIENT_HELP,
  cancel: CLIENT_HELP,
  logs: CLIENT_HELP,
};

function fail(message: string): never {
  process.stderr.write(`${message.startsWith('outlast ') ? message : `outlast: ${message}`}\n`);
  process.exit(2);
}

/** Runs a command's parse: its usage on --help (exit 0), one line and exit 2 on a usage mistake. */
function parsed<T>(command: string, parse: () => T): T {
  try {
    return parse();
  } catch (e) {
    if (e instanceof HelpRequested) {
      process.stdout.write(COMMAND_HELP[command] ?? HELP);
      process.exit(0);
    }
    if (e instanceof UsageError) fail(e.message);
    throw e;
  }
}

const SERVE_OPTIONS = { ...FRONT_OPTIONS, stdio: { type: 'boolean' } } as const;

async function serve(argv: string[]): Promise<void> {
  const { values, positionals } = parsed('serve', () => parseCommand('serve', argv, SERVE_OPTIONS, 1));
  const modulePath = positionals[0];
  if (!modulePath) fail('serve needs a MODULE path, e.g. outlast serve dist/demo/server.js');
  await runFront(values, async (options) => {
    const { outlast, factory, module: mod } = await loadServerModule(modulePath, options);
    return { outlast, factory, info: mod.info, describe: mod.info.name };
  }, fail);
}

export async function main(argv: string[]): Promise<void> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return serve(rest);
    case 'gateway':
      return gatewayCommand(parsed('gateway', () => parseCommand('gateway', rest, GATEWAY_OPTIONS, 0)).values, fail);
    case 'call':
      return runClientCommand(call, rest);
    case 'tasks':
      return runClientCommand(tasks, rest);
    case 'resume':
      return runClientCommand(resume, rest);
    case 'cancel':
      return runClientCommand(cancel, rest);
    case 'logs':
      return runClientCommand(logs, rest);
    case 'login':
      return runClientCommand(loginCommand, rest);
    case 'logout':
      return runClientCommand(logoutCommand, rest);
    case 'dashboard':
      return dashboardCommand(parsed('dashboard', () => dashboardArgs(rest)), fail);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(HELP);
      return;
    default:
      fail(`unknown command "${cmd}"; run outlast help`);
  }
}
