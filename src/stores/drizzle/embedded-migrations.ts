// Generated from drizzle/ (meta/_journal.json and each migration's SQL file): do not edit. After drizzle-kit
// generates a migration, write it again with
// UPDATE_EMBEDDED_MIGRATIONS=1 npx vitest run test/stores/drizzle-migrations-embedded.test.ts
// (that test fails while this file and drizzle/ differ).

/** One of this package's migrations, as Drizzle's migrator reads it from drizzle/. */
export interface PackageMigration {
  /** Its name in the journal, and its file's name in drizzle/ without `.sql`. */
  readonly tag: string;
  /** The journal's `when`, recorded as `created_at`. */
  readonly when: number;
  /** The SHA-256 of the file, in hex, recorded as `hash`. */
  readonly hash: string;
  /** The file's text: statements separated by `--> statement-breakpoint`. */
  readonly sql: string;
}

/** This package's migrations, oldest first: what drizzle/ holds. */
export const PACKAGE_MIGRATIONS: readonly PackageMigration[] = [
  {
    tag: '0000_idempotency_keys',
    when: 1796001050659,
    hash: 'f73be6adb8a9b143386f11e8cc8e1474a706483963470ac36e9808bb64e35909',
    sql: 'CREATE TABLE "idempotency_keys" (\n\t"id" text PRIMARY KEY NOT NULL,\n\t"state" text NOT NULL,\n\t"fingerprint" text NOT NULL,\n\t"token" text,\n\t"body" text,\n\t"expires_at" timestamp with time zone NOT NULL,\n\t"created_at" timestamp with time zone DEFAULT now() NOT NULL,\n\tCONSTRAINT "idempotency_keys_state_check" CHECK ("idempotency_keys"."state" in (\'in_progress\', \'completed\', \'failed\'))\n);\n--> statement-breakpoint\nCREATE INDEX "idempotency_keys_expires_at_idx" ON "idempotency_keys" USING btree ("expires_at");',
  },
  {
    tag: '0001_idempotency_steps',
    when: 1796072374369,
    hash: 'a3e8028e79bfb82a4a073e0a8a671fdc7b24ae65987c2c73a25c4482d91a8cbc',
    sql: 'CREATE TABLE "idempotency_steps" (\n\t"id" text NOT NULL,\n\t"seq" integer NOT NULL,\n\t"name" text NOT NULL,\n\t"fingerprint" text NOT NULL,\n\t"body" text NOT NULL,\n\t"expires_at" timestamp with time zone NOT NULL,\n\tCONSTRAINT "idempotency_steps_pkey" PRIMARY KEY("id","seq")\n);\n--> statement-breakpoint\nCREATE INDEX "idempotency_steps_expires_at_idx" ON "idempotency_steps" USING btree ("expires_at");',
  },
  {
    tag: '0002_lock_ttl_in_progress_idx',
    when: 1796202575004,
    hash: '763eae9989447303e13cda696136eb340377f909f712fd1d9ae29227f04ea51f',
    sql: 'ALTER TABLE "idempotency_keys" ADD COLUMN "lock_ttl" integer;--> statement-breakpoint\nCREATE INDEX "idempotency_keys_in_progress_idx" ON "idempotency_keys" USING btree ("id") WHERE "idempotency_keys"."state" = \'in_progress\';',
  },
];
