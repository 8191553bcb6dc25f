// How the SQLite store reads better-sqlite3's and libSQL's errors (see ../driver-errors.ts for what a message may
// say): the write lock not had within busy_timeout, and an outage (the file cannot be read or written, a closed
// connection).

/** The driver's error under a sanitized one. */
const codeOf = (error: Error): string => {
  const { code } = (error.cause ?? {}) as { code?: unknown };
  return typeof code === 'string' ? code : '';
};

/**
 * SQLITE_BUSY (and its extended codes): another connection held the lock for
 * longer than the connection's busy_timeout (0 by default on libSQL, 5 s on
 * better-sqlite3); SQLITE_LOCKED: a conflict within one shared-cache
 * connection. The statement did nothing.
 */
export const isBusy = (error: Error): boolean => /^SQLITE_(BUSY|LOCKED)/.test(codeOf(error));

/**
 * The database cannot serve now: the file cannot be read, written or opened
 * (SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_FULL, SQLITE_READONLY...), or the
 * connection is closed (better-sqlite3: "The database connection is not
 * open"; libSQL: CLIENT_CLOSED).
 */
export function isSqliteOutage(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && /^(SQLITE_(IOERR|CANTOPEN|FULL|READONLY|NOTADB|CORRUPT)|CLIENT_CLOSED)/.test(code))
    return true;
  return typeof message === 'string' && /database connection is not open|client is closed/i.test(message);
}
