/**
 * The protocol bugs `npm run test:mutations` plants (scripts/mutations.ts), one at a time: each replaces
 * one text, found exactly once in its file, and names the suites expected to catch it.
 */
export interface Mutation {
  name: string;
  /** The file, from the package's root. */
  file: string;
  find: string;
  replace: string;
  /** The test files (or folders) that should fail with the bug in place. */
  suites: string[];
}

export const MUTATIONS: Mutation[] = [
  {
    name: "Redis: the completion script does not check the caller's token",
    file: 'src/stores/redis/scripts.ts',
    find: 'if rec[1] then\n  if rec[2] ~= ARGV[1] then',
    replace: 'if rec[1] then\n  if false then',
    suites: ['test/model/redis.test.ts'],
  },
  {
    name: "the rules: a completion whose claim expired and was taken over stores over the new holder's claim",
    file: 'src/core/protocol/record.ts',
    find: "if (found.token !== input.token) return found.state === 'in_progress' ? 'held' : 'finished';",
    replace: "if (found.token !== input.token) return found.state === 'in_progress' ? 'write' : 'finished';",
    suites: ['test/model/memory.test.ts'],
  },
  {
    name: 'memory: a release forgets the steps of the claim it releases',
    file: 'src/stores/memory/store.ts',
    find: '      drop(id, rec!);\n      listeners.notify(id);\n      return true;',
    replace:
      '      drop(id, rec!);\n      const left = stepsOf.get(id);\n      if (left !== undefined) dropSteps(id, left);\n' +
      '      listeners.notify(id);\n      return true;',
    suites: ['test/model/memory.test.ts'],
  },
  {
    name: 'Redis: the restart fence is skipped when its marker is missing (an empty restart)',
    file: 'src/stores/redis/scripts.ts',
    find: "  if not lost then\n    redis.call('SET', marker, string.format('%d', now))\n    lost = now\n  end",
    replace: '  if not lost then\n    return nil\n  end',
    suites: ['test/model/redis.test.ts'],
  },
  {
    name: "PostgreSQL: a renewal does not check the caller's token",
    file: 'src/stores/drizzle/statements.ts',
    find: `lock_ttl = $\{LOCK_TTL('$3')}\n     where id = $1 and token = $2 and`,
    replace: `lock_ttl = $\{LOCK_TTL('$3')}\n     where id = $1 and $2::text is not null and`,
    suites: ['test/model/postgres.test.ts'],
  },
  {
    name: 'engine: a release refused because the claim was lost emits no terminal event',
    file: 'src/core/settle.ts',
    find: '    } else if (released === false) {\n      run.fenced();\n    }',
    replace: '    }',
    suites: ['test/sim'],
  },
];
