CREATE TABLE `idempotency_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`state` text NOT NULL,
	`fingerprint` text NOT NULL,
	`token` text,
	`body` text,
	`expires_at` integer NOT NULL,
	`created_at` integer NOT NULL,
	`lock_ttl` integer,
	CONSTRAINT "idempotency_keys_state_check" CHECK("idempotency_keys"."state" in ('in_progress', 'completed', 'failed'))
);
--> statement-breakpoint
CREATE INDEX `idempotency_keys_expires_at_idx` ON `idempotency_keys` (`expires_at`);--> statement-breakpoint
CREATE INDEX `idempotency_keys_in_progress_idx` ON `idempotency_keys` (`id`) WHERE "idempotency_keys"."state" = 'in_progress';--> statement-breakpoint
CREATE TABLE `idempotency_steps` (
	`id` text NOT NULL,
	`seq` integer NOT NULL,
	`name` text NOT NULL,
	`fingerprint` text NOT NULL,
	`body` text NOT NULL,
	`expires_at` integer NOT NULL,
	PRIMARY KEY(`id`, `seq`)
);
--> statement-breakpoint
CREATE INDEX `idempotency_steps_expires_at_idx` ON `idempotency_steps` (`expires_at`);