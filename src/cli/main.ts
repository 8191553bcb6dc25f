/**
 * The `trpc-idempotency` command: reads the command line, runs the command,
 * reports an error as one line on stderr, and answers the exit code (see
 * exit-codes.ts). src/cli.ts is the executable that calls it.
 */
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { IdempotencyConfigError } from '../core/idempotency-error.js';
import { BIN, parseCommandLine } from './args.js';
import { type Io, RUN } from './commands.js';
import { CliError, EXIT } from './exit-codes.js';

const processIo: Io = {
  stdout: (text) => void process.stdout.write(`${text}\n`),
  stderr: (text) => void process.stderr.write(`${text}\n`),
};

/**
 * This package's version, from its package.json, found from the running
 * script (the bin link resolved): the same code serves the ESM and the
 * CommonJS builds (the module URL exists only in ESM).
 */
function version(): string {
  let dir = dirname(realpathSync(process.argv[1] ?? '.'));
  for (;;) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'trpc-idempotency' && pkg.version !== undefined) return pkg.version;
    }
    const up = dirname(dir);
    if (up === dir) return 'unknown';
    dir = up;
  }
}

/** Runs the command line `argv` (without node and the script) and answers the exit code. */
export async function main(argv: readonly string[], io: Io = processIo): Promise<number> {
  try {
    const parsed = parseCommandLine(argv);
    if (parsed.kind === 'help') {
      io.stdout(parsed.text);
      return EXIT.ok;
    }
    if (parsed.kind === 'version') {
      io.stdout(version());
      return EXIT.ok;
    }
    return await RUN[parsed.command](parsed.values, io);
  } catch (error) {
    if (error instanceof CliError) {
      io.stderr(`${BIN}: ${error.message}`);
      return error.code;
    }
    if (error instanceof IdempotencyConfigError) {
      io.stderr(`${BIN}: ${error.message}`);
      return EXIT.failure;
    }
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    io.stderr(`${BIN}: failed: ${text}`);
    if (process.env.TRPC_IDEMPOTENCY_DEBUG && error instanceof Error && error.stack) io.stderr(error.stack);
    return EXIT.failure;
  }
}
