// Generated from drizzle/sqlite/ (meta/_journal.json and each migration's SQL file): do not edit. After
// drizzle-kit generates a migration (npx drizzle-kit generate --config drizzle-sqlite.config.ts), write it again with
// UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts
// (that test fails while this file and drizzle/sqlite/ differ).
import type { PackageMigration } from '../embedded-migrations.js';

/** This package's SQLite migrations, oldest first: what drizzle/sqlite/ holds. */
export const SQLITE_MIGRATIONS: readonly PackageMigration[] = [
  {
    tag: '0000_idempotency_keys',
    when: 1796418239990,
    hash: '0e40b2e2dfa67d4382804a44151cc8cc679be579f34602e9785e58efc7409e5e',
    sql: 'CREATE TABLE `idempotency_keys` (\n\t`id` text PRIMARY KEY NOT NULL,\n\t`state` text NOT NULL,\n\t`fingerprint` text NOT NULL,\n\t`token` text,\n\t`body` text,\n\t`expires_at` integer NOT NULL,\n\t`created_at` integer NOT NULL,\n\t`lock_ttl` integer,\n\tCONSTRAINT "idempotency_keys_state_check" CHECK("idempotency_keys"."state" in (\'in_progress\', \'completed\', \'failed\'))\n);\n--> statement-breakpoint\nCREATE INDEX `idempotency_keys_expires_at_idx` ON `idempotency_keys` (`expires_at`);--> statement-breakpoint\nCREATE INDEX `idempotency_keys_in_progress_idx` ON `idempotency_keys` (`id`) WHERE "idempotency_keys"."state" = \'in_progress\';--> statement-breakpoint\nCREATE TABLE `idempotency_steps` (\n\t`id` text NOT NULL,\n\t`seq` integer NOT NULL,\n\t`name` text NOT NULL,\n\t`fingerprint` text NOT NULL,\n\t`body` text NOT NULL,\n\t`expires_at` integer NOT NULL,\n\tPRIMARY KEY(`id`, `seq`)\n);\n--> statement-breakpoint\nCREATE INDEX `idempotency_steps_expires_at_idx` ON `idempotency_steps` (`expires_at`);',
  },
];
