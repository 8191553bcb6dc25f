CREATE TABLE "idempotency_steps" (
	"id" text NOT NULL,
	"seq" integer NOT NULL,
	"name" text NOT NULL,
	"fingerprint" text NOT NULL,
	"body" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "idempotency_steps_pkey" PRIMARY KEY("id","seq")
);
--> statement-breakpoint
ALTER TABLE "charges" ADD COLUMN "provider_charge_id" text;--> statement-breakpoint
CREATE INDEX "idempotency_steps_expires_at_idx" ON "idempotency_steps" USING btree ("expires_at");