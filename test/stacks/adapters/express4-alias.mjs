// `node --import ./express4-alias.mjs out/express.js`: docs/adapters.md's express.ts, run on Express 4
// (installed as `express4`, npm:express@4): every import of `express` resolves to it, and says so.
import { register } from 'node:module';

register(
  `data:text/javascript,${encodeURIComponent(`
export async function resolve(specifier, context, next) {
  if (specifier !== 'express') return next(specifier, context);
  const resolved = await next('express4', context);
  console.log('express -> ' + resolved.url);
  return resolved;
}`)}`,
  import.meta.url,
);
