/**
 * The `outlast` command.
 *   outlast serve MODULE [--port N] [--host H] [--store sqlite:PATH] [--stdio] [--default-ttl-ms N]
 *                        [--bearer TOKEN=PRINCIPAL]... [tuning flags, see `outlast help`]
 *   outlast gateway --stdio "CMD ARGS" | --http URL | --config FILE [the same front flags]
 */
import { HelpRequested, UsageError, parseCommand } from './usage.js';

// Each command's module is imported when that command runs: the client commands and their usage lines load none of
// the server (`outlast call --help` answers in a sixth of the time).
const front = () => import('./front-command.js');
const gateway = () => import('./gateway-command.js');
const dashboard = () => import('./dashboard-command.js');
const client = () => import('./client-commands.js');

async function serveUsage(): Promise<string> {
  return `Usage:
  outlast serve MODULE [options]   serve the tools of MODULE: a JS module that exports \`outlast\` (an Outlast) and
                                   \`serverInfo\`, as the README's quick start does, or default-exports
                                   defineServer({...}) (docs/server-authors.md#a-module-served-by-the-cli)

Options for serve (outlast gateway takes them too, all but --stdio):
  --stdio                  serve on stdin/stdout instead of HTTP
${(await front()).FRONT_HELP}`;
}

async function fullHelp(): Promise<string> {
  return `outlast: durable MCP Tasks (io.modelcontextprotocol/tasks, 2026-07-28)

${await serveUsage()}
${(await gateway()).GATEWAY_HELP}
${(await dashboard()).DASHBOARD_HELP}
${(await client()).CLIENT_HELP}`;
}

/** What `outlast COMMAND --help` prints. */
async function commandHelp(command: string): Promise<string> {
  switch (command) {
    case 'serve':
      return serveUsage();
    case 'gateway':
      return `${(await gateway()).GATEWAY_HELP}
Front options (as for serve):
${(await front()).FRONT_HELP}`;
    case 'dashboard':
      return (await dashboard()).DASHBOARD_HELP;
    default:
      return fullHelp();
  }
}

const SHORT_USAGE = `Usage: outlast COMMAND [options]   (outlast help: every option; outlast COMMAND --help: one command's)
  serve MODULE       serve the tools of a module (the README's quick start, or defineServer({...}))
  gateway            make MCP servers you did not write durable (--stdio "CMD ARGS", --http URL, --config FILE)
  dashboard          the operations dashboard alone, against a store
  call URL TOOL      call a tool and follow its task to the end
  tools URL          list a server's tools
  tasks              list the calls in the journal
  resume [TASK_ID]   follow unfinished tasks to the end
  cancel TASK_ID     ask the server to cancel a task
  logs TASK_ID       print a task's output
  answer TASK_ID     answer a task's questions
  login URL / logout URL   sign in to (out of) an OAuth-protected server
`;

function fail(message: string): never {
  process.stderr.write(`${message.startsWith('outlast ') ? message : `outlast: ${message}`}\n`);
  process.exit(2);
}

/** Runs a command's parse: its usage on --help (exit 0), one line and exit 2 on a usage mistake. */
async function parsed<T>(command: string, parse: () => T): Promise<T> {
  try {
    return parse();
  } catch (e) {
    if (e instanceof HelpRequested) {
      process.stdout.write(await commandHelp(command));
      process.exit(0);
    }
    if (e instanceof UsageError) fail(e.message);
    throw e;
  }
}

async function serve(argv: string[]): Promise<void> {
  const { FRONT_OPTIONS, runFront } = await front();
  const { values, positionals } = await parsed('serve', () => parseCommand('serve', argv, { ...FRONT_OPTIONS, stdio: { type: 'boolean' } } as const, 1));
  const modulePath = positionals[0];
  if (!modulePath) fail('serve needs a MODULE path, e.g. outlast serve dist/demo/server.js');
  const { mountServedModule } = await import('./serve-module.js');
  await runFront(values, (options) => mountServedModule(modulePath, values, options), fail);
}

export async function main(argv: string[]): Promise<void> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return serve(rest);
    case 'gateway': {
      const { GATEWAY_OPTIONS, gatewayCommand } = await gateway();
      return gatewayCommand((await parsed('gateway', () => parseCommand('gateway', rest, GATEWAY_OPTIONS, 0))).values, fail);
    }
    case 'call':
    case 'tasks':
    case 'resume':
    case 'cancel':
    case 'logs':
    case 'answer':
    case 'login':
    case 'logout': {
      const c = await client();
      const commands = { call: c.call, tasks: c.tasks, resume: c.resume, cancel: c.cancel, logs: c.logs, answer: c.answer, login: c.loginCommand, logout: c.logoutCommand };
      return c.runClientCommand(commands[cmd], rest);
    }
    case 'tools': {
      const [c, t] = await Promise.all([client(), import('./tools-command.js')]);
      return c.runClientCommand(t.tools, rest);
    }
    case 'dashboard': {
      const { dashboardArgs, dashboardCommand } = await dashboard();
      return dashboardCommand(await parsed('dashboard', () => dashboardArgs(rest)), fail);
    }
    case undefined:
      // No command is a usage mistake (a script that lost its arguments must not pass): the commands, exit 2.
      process.stderr.write(SHORT_USAGE);
      return process.exit(2);
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(await fullHelp());
      return;
    default:
      fail(`unknown command "${cmd}"; run outlast help`);
  }
}
