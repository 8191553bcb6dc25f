// Generated from drizzle/mysql/ (meta/_journal.json and each migration's SQL file): do not edit. After
// drizzle-kit generates a migration (npx drizzle-kit generate --config drizzle-mysql.config.ts), write it again with
// UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts
// (that test fails while this file and drizzle/mysql/ differ).
import type { PackageMigration } from '../embedded-migrations.js';

/** This package's MySQL/MariaDB migrations, oldest first: what drizzle/mysql/ holds. */
export const MYSQL_MIGRATIONS: readonly PackageMigration[] = [
  {
    tag: '0000_idempotency_keys',
    when: 1796406573317,
    hash: '8abaa2eaf594941403947f4d5ad629acb105ae7e1afa9fb805c72c4d69e0a971',
    sql: "CREATE TABLE `idempotency_keys` (\n\t`id` varbinary(3000) NOT NULL,\n\t`state` varchar(16) NOT NULL,\n\t`fingerprint` varbinary(255) NOT NULL,\n\t`token` varbinary(255),\n\t`body` longblob,\n\t`expires_at` datetime(3) NOT NULL,\n\t`created_at` datetime(3) NOT NULL,\n\t`lock_ttl` int,\n\tCONSTRAINT `idempotency_keys_id` PRIMARY KEY(`id`),\n\tCONSTRAINT `idempotency_keys_state_check` CHECK(`idempotency_keys`.`state` in ('in_progress', 'completed', 'failed'))\n);\n--> statement-breakpoint\nCREATE TABLE `idempotency_steps` (\n\t`id` varbinary(3000) NOT NULL,\n\t`seq` int NOT NULL,\n\t`name` blob NOT NULL,\n\t`fingerprint` varbinary(255) NOT NULL,\n\t`body` longblob NOT NULL,\n\t`expires_at` datetime(3) NOT NULL,\n\tCONSTRAINT `idempotency_steps_pkey` PRIMARY KEY(`id`,`seq`)\n);\n--> statement-breakpoint\nCREATE INDEX `idempotency_keys_expires_at_idx` ON `idempotency_keys` (`expires_at`);--> statement-breakpoint\nCREATE INDEX `idempotency_keys_state_idx` ON `idempotency_keys` (`state`);--> statement-breakpoint\nCREATE INDEX `idempotency_steps_expires_at_idx` ON `idempotency_steps` (`expires_at`);",
  },
];
