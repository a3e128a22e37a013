#!/usr/bin/env node
import { main } from '../dist/src/cli/main.js';

main(process.argv.slice(2)).catch((e) => {
  process.stderr.write(`outlast: ${e?.stack ?? e}\n`);
  process.exit(1);
});
