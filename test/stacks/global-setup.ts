/**
 * The stacks suite packs the library once: every test file installs the same
 * tarball (a build per file cost a build each, and two builds at once in one
 * checkout empty each other's dist/).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { packLibrary } from './pack.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The packed library (`npm pack` of this checkout, built first). */
    tgz: string;
    /** How long the build and the pack took, in ms (0: the tarball was given, TRPC_IDEMPOTENCY_TGZ). */
    packMs: number;
  }
}

export default async function setup(project: TestProject) {
  // npm test (scripts/test.sh) packs once, or passes on the tarball .ci/run's package check made
  const given = process.env.TRPC_IDEMPOTENCY_TGZ;
  if (given !== undefined && given !== '') {
    project.provide('tgz', given);
    project.provide('packMs', 0);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), 'trpc-idempotency-pack-'));
  const { tgz, ms } = await packLibrary(dir);
  project.provide('tgz', tgz);
  project.provide('packMs', ms);
  return () => rmSync(dir, { recursive: true, force: true });
}
