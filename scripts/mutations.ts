/**
 * npm run test:mutations: proof that the model-based contract (test/model) and the engine's simulation
 * (test/sim) bite. Each mutation below plants one protocol bug, alone, in a scratch worktree of this
 * checkout's HEAD; the suites that should catch it run there, with the case counts CI uses; a bug is
 * caught when they fail. The suites run once unmutated first (a failure there makes every "caught"
 * meaningless, so the run stops). Prints a table: the bug, caught or not, after how many generated cases
 * (fast-check's "failed after N tests"), and how long the suites took. Exits 1 if a bug goes uncaught.
 *
 *   npm run test:mutations [-- <name fragment>]   only the mutations whose name contains it
 *
 * A mutation whose text is no longer in its file (the code moved on) is reported as such, and fails the run:
 * update it here.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { MUTATIONS, type Mutation } from './mutations-list.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const only = process.argv[2];
const chosen = MUTATIONS.filter((m) => only === undefined || m.name.includes(only));
if (chosen.length === 0) {
  console.error(
    `no mutation's name contains "${only}": the names are\n${MUTATIONS.map((m) => `  ${m.name}`).join('\n')}`,
  );
  process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), 'idem-mutations-'));
const git = (...args: string[]) => {
  const done = spawnSync('git', args, { cwd: root, encoding: 'utf8' });
  if (done.status !== 0) throw new Error(`git ${args.join(' ')}: ${done.stderr}`);
};
git('worktree', 'add', '--detach', '--quiet', scratch, 'HEAD');
symlinkSync(join(root, 'node_modules'), join(scratch, 'node_modules'));

interface Outcome {
  caught: boolean;
  cases?: number;
  seconds: number;
  output: string;
}

function runSuites(files: string[]): Outcome {
  const started = performance.now();
  const run = spawnSync('npx', ['vitest', 'run', ...files], {
    cwd: scratch,
    encoding: 'utf8',
    env: { ...process.env, CI: 'true', NO_COLOR: '1' },
    maxBuffer: 256 * 1024 * 1024,
  });
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the colours a reporter may print anyway
  const output = `${run.stdout}${run.stderr}`.replace(/\u001b\[[0-9;]*m/g, '');
  const cases = [...output.matchAll(/failed after (\d+) tests?/g)].map((m) => Number(m[1]));
  return {
    caught: run.status !== 0,
    ...(cases.length > 0 ? { cases: Math.min(...cases) } : {}),
    seconds: Math.round((performance.now() - started) / 100) / 10,
    output,
  };
}

function plant(mutation: Mutation): string | undefined {
  const path = join(scratch, mutation.file);
  const text = readFileSync(path, 'utf8');
  const at = text.split(mutation.find).length - 1;
  if (at !== 1) return `its text is in ${mutation.file} ${at} times, not once`;
  writeFileSync(path, text.replace(mutation.find, mutation.replace));
  return undefined;
}

const rows: string[] = [];
let failed = false;
try {
  const suites = [...new Set(chosen.flatMap((m) => m.suites))];
  const baseline = runSuites(suites);
  if (baseline.caught) {
    console.error(baseline.output);
    throw new Error(`the suites fail without any mutation (${suites.join(', ')}): fix that first`);
  }
  console.log(`unmutated: ${suites.join(', ')} pass (${baseline.seconds} s)\n`);
  for (const mutation of chosen) {
    const refused = plant(mutation);
    if (refused !== undefined) {
      failed = true;
      rows.push(`| ${mutation.name} | not planted: ${refused} | | |`);
    } else {
      const outcome = runSuites(mutation.suites);
      if (!outcome.caught) failed = true;
      const failing = [...new Set([...outcome.output.matchAll(/FAIL\s+(?:\S+\s+)?(\S+\.test\.ts)/g)].map((m) => m[1]))];
      rows.push(
        `| ${mutation.name} | ${outcome.caught ? `caught by ${failing.join(', ') || 'the suites'}` : 'NOT caught'} | ` +
          `${outcome.cases ?? ''} | ${outcome.seconds} s |`,
      );
      git('-C', scratch, 'checkout', '--quiet', '--', mutation.file);
    }
    console.log(rows.at(-1));
  }
} finally {
  git('worktree', 'remove', '--force', scratch);
  rmSync(scratch, { recursive: true, force: true });
}
console.log(`\n| planted bug | result | cases to the first failure | time |\n|---|---|---|---|\n${rows.join('\n')}`);
process.exit(failed ? 1 : 0);
