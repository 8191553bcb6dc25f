/**
 * The CLI's exit codes, for scripts to branch on. `--help` lists them; a
 * change here is a breaking change of the command line.
 */
export const EXIT = {
  /** Done, or found: the command did what it was asked (a listing may be empty). */
  ok: 0,
  /** Failure: the store cannot be reached, a peer dependency is missing, an unexpected error. */
  failure: 1,
  /** Usage error: an unknown command or flag, a missing or malformed value. Nothing was read or changed. */
  usage: 2,
  /** Refused by a guard: a dry run without --confirm, or a live claim without --force. Nothing was deleted. */
  refused: 3,
  /** No such record: inspect or release of an absent record. */
  absent: 4,
  /** The record changed between the read and the delete (completed, released, taken over): nothing was deleted. */
  changed: 5,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** The exit codes as `--help` shows them. */
export const EXIT_CODES_HELP = `Exit codes:
  0  done or found (a listing may be empty)
  1  failure: store unreachable, a peer dependency missing, an unexpected error
  2  usage error: unknown command or flag, missing or malformed value (nothing was read)
  3  refused by a guard: dry run without --confirm, or a live claim without --force
  4  no such record: inspect or release of an absent record
  5  the record changed between the read and the delete: nothing was deleted`;

/** An error the CLI reports as one message and an exit code, without a stack. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly code: ExitCode,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** A usage error (exit 2): what was wrong and what to pass. */
export const usageError = (message: string) => new CliError(message, EXIT.usage);
