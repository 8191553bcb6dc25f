import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { drizzle, type MySql2Database } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { migrateIdempotencyKeys } from '../../src/drizzle.js';

/** MariaDB 10.11 (or MySQL 8) on this machine: root, no password. */
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
export const MYSQL_MIGRATIONS = fileURLToPath(new URL('../../drizzle/mysql', import.meta.url));

export interface MysqlDatabase {
  /** A Drizzle database on a pool of `poolSize` connections. */
  db: MySql2Database;
  pool: mysql.Pool;
  /** The database's name, and a URL whose connections use it. */
  database: string;
  url: string;
  /** A Drizzle database on one connection of its own (made on first use, closed by drop). */
  single(): Promise<MySql2Database>;
  drop(): Promise<void>;
}

/**
 * A database of its own on the real server, migrated with the package's
 * migrations (migrateIdempotencyKeys, from drizzle/mysql) unless `migrate` is
 * false, so test files never see each other's rows.
 */
export async function isolatedDatabase(label: string, poolSize = 10, migrate = true): Promise<MysqlDatabase> {
  const database = `idem_${label.replaceAll(/[^a-z0-9_]/gi, '_')}_${randomUUID().slice(0, 8)}`;
  const admin = await mysql.createConnection(MYSQL_URL);
  await admin.query(`create database \`${database}\``);
  await admin.end();
  const url = new URL(MYSQL_URL);
  url.pathname = `/${database}`;
  const pool = mysql.createPool({ uri: url.toString(), connectionLimit: poolSize });
  const db = drizzle(pool);
  if (migrate) await migrateIdempotencyKeys(db, { migrationsFolder: MYSQL_MIGRATIONS });
  let connection: mysql.Connection | undefined;
  return {
    db,
    pool,
    database,
    url: url.toString(),
    async single() {
      connection ??= await mysql.createConnection(url.toString());
      return drizzle(connection);
    },
    async drop() {
      await connection?.end();
      await pool.end();
      const cleanup = await mysql.createConnection(MYSQL_URL);
      await cleanup.query(`drop database \`${database}\``);
      await cleanup.end();
    },
  };
}
