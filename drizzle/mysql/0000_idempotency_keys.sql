CREATE TABLE `idempotency_keys` (
	`id` varbinary(3000) NOT NULL,
	`state` varchar(16) NOT NULL,
	`fingerprint` varbinary(255) NOT NULL,
	`token` varbinary(255),
	`body` longblob,
	`expires_at` datetime(3) NOT NULL,
	`created_at` datetime(3) NOT NULL,
	`lock_ttl` int,
	CONSTRAINT `idempotency_keys_id` PRIMARY KEY(`id`),
	CONSTRAINT `idempotency_keys_state_check` CHECK(`idempotency_keys`.`state` in ('in_progress', 'completed', 'failed'))
);
--> statement-breakpoint
CREATE TABLE `idempotency_steps` (
	`id` varbinary(3000) NOT NULL,
	`seq` int NOT NULL,
	`name` blob NOT NULL,
	`fingerprint` varbinary(255) NOT NULL,
	`body` longblob NOT NULL,
	`expires_at` datetime(3) NOT NULL,
	CONSTRAINT `idempotency_steps_pkey` PRIMARY KEY(`id`,`seq`)
);
--> statement-breakpoint
CREATE INDEX `idempotency_keys_expires_at_idx` ON `idempotency_keys` (`expires_at`);--> statement-breakpoint
CREATE INDEX `idempotency_keys_state_idx` ON `idempotency_keys` (`state`);--> statement-breakpoint
CREATE INDEX `idempotency_steps_expires_at_idx` ON `idempotency_steps` (`expires_at`);