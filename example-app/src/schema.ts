import { integer, pgTable, serial, text, timestamp } from 'drizzle-orm/pg-core';

// The library's tables live in our schema, so our migrations create them too.
export { idempotencyKeys, idempotencySteps } from 'trpc-idempotency/drizzle';

/** The ledger: one row per charge. */
export const charges = pgTable('charges', {
  id: serial('id').primaryKey(),
  userId: text('user_id').notNull(),
  amount: integer('amount').notNull(),
  currency: text('currency').notNull(),
  /** Which instance ran the charge. */
  instance: text('instance').notNull(),
  /** The card provider's id of the charge (null for rows written before the provider). */
  providerChargeId: text('provider_charge_id'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

export const refunds = pgTable('refunds', {
  id: serial('id').primaryKey(),
  // No foreign key: drizzle-kit would write it as "public"."charges", and the
  // tests run each app in a schema of its own.
  chargeId: integer('charge_id').notNull(),
  amount: integer('amount').notNull(),
  instance: text('instance').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

export type Charge = typeof charges.$inferSelect;
export type Refund = typeof refunds.$inferSelect;
