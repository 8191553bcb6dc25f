// drizzle-kit configuration of the example app: `npx drizzle-kit generate --config example-app/drizzle.config.ts`
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './example-app/src/schema.ts',
  out: './example-app/drizzle',
});
