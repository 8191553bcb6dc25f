#!/usr/bin/env node
// The `trpc-idempotency` command (package.json "bin"): operator tools for the stores (src/cli/).
import { main } from './cli/main.js';

// A reader that stops early (`| head`) closes the pipe: not an error of the command.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

void main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
  // Every connection is closed by now, so the process ends by itself; should a driver still hold
  // a handle, it ends anyway (the timer does not keep it alive).
  setTimeout(() => {
    process.stderr.write('trpc-idempotency: a connection was still open 2 s after the command ended: exiting.\n');
    process.exit(code);
  }, 2_000).unref();
});
