// drizzle-kit configuration for the store's own migrations (npx drizzle-kit generate).
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/stores/drizzle/schema.ts',
  out: './drizzle',
});
