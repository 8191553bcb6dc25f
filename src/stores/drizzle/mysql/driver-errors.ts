// How the MySQL/MariaDB store reads mysql2's errors (see ../driver-errors.ts for
// what a message may say): an outage, a deadlock to run again, a lock wait that
// timed out, a duplicate key.

/** The driver's error under a sanitized one. */
const codeOf = (error: Error): unknown => (error.cause as { code?: unknown } | undefined)?.code;

/**
 * ER_LOCK_DEADLOCK: InnoDB rolled back the statement's transaction (in
 * autocommit, the statement alone), so it can simply run again.
 */
export const isDeadlock = (error: Error): boolean => codeOf(error) === 'ER_LOCK_DEADLOCK';

/**
 * ER_LOCK_WAIT_TIMEOUT: the statement waited innodb_lock_wait_timeout (50 s
 * by default) for a row lock; running it again would wait as long.
 */
export const isLockWaitTimeout = (error: Error): boolean => codeOf(error) === 'ER_LOCK_WAIT_TIMEOUT';

/** ER_DUP_ENTRY: an insert met a row another statement wrote first. */
export const isDuplicateKey = (error: Error): boolean => codeOf(error) === 'ER_DUP_ENTRY';

const OUTAGE_CODES = new Set([
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ER_CON_COUNT_ERROR',
  'ER_TOO_MANY_USER_CONNECTIONS',
  'ER_SERVER_SHUTDOWN',
  'ER_CONNECTION_KILLED',
  'ER_QUERY_INTERRUPTED',
  // a failover left the connection on a read-only server (read_only, super_read_only)
  'ER_OPTION_PREVENTS_STATEMENT',
  'ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION',
  // max_statement_time (MariaDB), max_execution_time (MySQL)
  'ER_STATEMENT_TIMEOUT',
  'ER_QUERY_TIMEOUT',
]);

/**
 * The server cannot be reached or cannot serve now: socket errors, a lost
 * connection (mysql2 marks it `fatal`), too many connections, a shutdown, a
 * server that turned read-only, a statement timeout, a closed pool.
 */
export function isMysqlOutage(error: unknown): boolean {
  const { code, fatal, message } = (error ?? {}) as { code?: unknown; fatal?: unknown; message?: unknown };
  if (fatal === true) return true;
  if (typeof code === 'string' && (OUTAGE_CODES.has(code) || /^E[A-Z]+$/.test(code))) return true;
  return (
    typeof message === 'string' &&
    /pool is closed|connection is in closed state|can't add new command when connection is in closed state/i.test(
      message,
    )
  );
}
