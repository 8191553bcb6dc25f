// drizzle-kit configuration for the SQLite store's migrations (npx drizzle-kit generate --config drizzle-sqlite.config.ts).
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'sqlite',
  schema: './src/stores/drizzle/sqlite/schema.ts',
  out: './drizzle/sqlite',
});
