import { defineConfig } from 'drizzle-kit';
export default defineConfig({
  dialect: 'mysql',
  schema: './src/stores/drizzle/mysql/schema.ts',
  out: './drizzle/mysql',
});
