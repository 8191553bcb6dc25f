#!/usr/bin/env node
// The `trpc-idempotency` command (package.json "bin"): operator tools for the stores (src/cli/).
import { main } from './cli/main.js';

// A reader that stops early (`| head`) closes the pipe: not an error of the command.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

// Every command closes its connections, so the process ends by itself: no forced exit that would
// hide a handle left open (the CLI's tests fail on a command that does not end).
void main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
