// Loaded with `--import` by `npm run test:quick`: a file marked `// test:quick` promises no child process, so
// starting one throws, naming the call, instead of quietly making the quick loop slow.
import childProcess from 'node:child_process';
import { syncBuiltinESMExports } from 'node:module';

for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork']) {
  childProcess[name] = () => {
    throw new Error(`child_process.${name} in a file marked // test:quick: remove the marker, or start no process`);
  };
}
// ESM named imports of node:child_process read the patched functions only after this.
syncBuiltinESMExports();
