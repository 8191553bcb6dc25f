import { storeFailure } from '../../core/idempotency-error.js';

// How the PostgreSQL store reads a driver's error (sanitize serves the MySQL store too): what it may say, whether it
// is an outage, a conflict to run again, or a prepared statement the server lost.

/**
 * Drizzle's query errors quote the statement and its parameters, which hold
 * keys and bodies: keep the driver's own error (its message names the
 * problem, not the values) and drop the rest.
 */
export function sanitize(error: unknown, outage: (driverError: unknown) => boolean = isOutage): Error {
  const quotesQuery = error instanceof Error && error.message.startsWith('Failed query:');
  const driverError =
    error instanceof Error && error.cause instanceof Error ? error.cause : quotesQuery ? undefined : error;
  if (driverError === undefined) return new Error('drizzleStore: a query failed (the driver gave no reason).');
  const message = driverError instanceof Error ? driverError.message : String(driverError);
  const sanitized = new Error(`drizzleStore: ${message}`, { cause: driverError });
  return outage(driverError) ? storeFailure('unavailable', sanitized) : sanitized;
}

/** SQLSTATE of a serialization failure or a deadlock: the statement can simply run again. */
export function isConflict(error: Error): boolean {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return code === '40001' || code === '40P01';
}

/**
 * The server cannot be reached or cannot serve now: connection errors
 * (SQLSTATE class 08, socket errors, the drivers' own), shutdowns and restarts
 * (57P01-57P03), too many connections (53300), and timeouts (a statement or
 * lock timeout: 57014, 55P03).
 */
function isOutage(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (code.startsWith('08') || /^(57P0[123]|53300|57014|55P03)$/.test(code)) return true;
    if (/^E[A-Z]+$/.test(code) || code.startsWith('CONNECT')) return true; // ECONNREFUSED, ECONNRESET...; postgres-js CONNECTION_*
  }
  return (
    typeof message === 'string' &&
    /connection|terminated|timeout exceeded when trying to connect|not queryable/i.test(message)
  );
}

/**
 * SQLSTATE of a named prepared statement the server does not have (26000),
 * or has already (42P05): a connection pooler in transaction mode (PgBouncer
 * before 1.21...) moved the session's statements. Both fail before the
 * statement runs, so it can run again, unnamed.
 */
export function isPreparedStatementMiss(error: Error): boolean {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return code === '26000' || code === '42P05';
}
