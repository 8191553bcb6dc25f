/** bench/RESULTS.md and the table printed at the end of a run, from results.json's data. */

interface Row {
  name: string;
  baseline: string;
  baseline_rps: number;
  rps: number;
  ratio: number;
  ratios: number[];
  p50_ms: number;
  p99_ms: number;
  baseline_p50_ms: number;
  baseline_p99_ms: number;
  server_cpu_us_per_req: number;
  baseline_server_cpu_us_per_req: number;
  redis_calls_per_req: Record<string, number>;
  postgres_cpu_us_per_req: number;
  redis_cpu_us_per_req: number;
  non2xx: number;
}

interface Growth {
  records: number;
  empty_rps: number;
  full_rps: number;
  ratio: number;
  empty_p99_ms: number;
  full_p99_ms: number;
}

export interface Results {
  machine: Record<string, string | number>;
  date: string;
  settings: { rounds: number; duration_s: number; warmup_s: number; connections: number; replay_keys: number };
  load_average: { before: number[]; after: number[]; waited_for_quiet_s?: number; reached_quiet?: boolean };
  rows: Row[];
  store_ops: {
    redis_first: number;
    redis_replay: number;
    redis_reject: number;
    pg_first: number;
    pg_replay: number;
    pg_reject: number;
    redis_in_scripts: Record<'first' | 'replay' | 'reject', Record<string, number>>;
  };
  redis_bytes_per_record: number;
  redis_used_memory_per_record: number;
  record_body_bytes: number;
  peer_redis_bytes_per_record: Record<string, number>;
  overhead_us_per_call: number;
  overhead: { baseline_us: number; idempotent_us: number; fingerprint_us: number };
  growth: { redis: Growth & { keys_in_redis: number }; postgres: Growth };
  purge: { rows: number; deleted: number; seconds: number; batch_size: number; rows_per_second: number };
  duration_s: number;
}

const OURS = ['floor', 'memory', 'redis', 'postgres'];

/** Commands the client sent per request (the handler's INCR left out), and those run inside scripts. */
export function redisCommands(calls: Record<string, number>): { sent: number; inScripts: number } {
  const scripted = (calls.evalsha ?? 0) + (calls.eval ?? 0) > 0;
  let sent = 0;
  let inScripts = 0;
  for (const [cmd, n] of Object.entries(calls)) {
    if (cmd === 'incr') continue;
    if (!scripted || cmd === 'evalsha' || cmd === 'eval') sent += n;
    else inScripts += n;
  }
  return { sent: Math.round(sent * 100) / 100, inScripts: Math.round(inScripts * 100) / 100 };
}

const fmt = (n: number) => n.toLocaleString('en-US');
const ms = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1));

function rowsTable(rows: Row[]): string {
  const lines = [
    '| Variant | Baseline req/s | req/s | Ratio | Ratio per round | p50 / p99 ms (baseline) | Server CPU µs/req (baseline) | Redis commands/req |',
    '| --- | ---: | ---: | ---: | --- | --- | --- | --- |',
  ];
  for (const r of rows) {
    const { sent, inScripts } = redisCommands(r.redis_calls_per_req);
    const cmds =
      r.name.startsWith('memory') || r.name.startsWith('postgres')
        ? '0'
        : `${sent}${inScripts > 0 ? ` (+${inScripts} in scripts)` : ''}`;
    lines.push(
      `| ${r.name} | ${fmt(r.baseline_rps)} | ${fmt(r.rps)} | **${r.ratio.toFixed(2)}** | ${r.ratios.map((x) => x.toFixed(2)).join(' ')} | ${ms(r.p50_ms)} / ${ms(r.p99_ms)} (${ms(r.baseline_p50_ms)} / ${ms(r.baseline_p99_ms)}) | ${r.server_cpu_us_per_req} (${r.baseline_server_cpu_us_per_req}) | ${cmds} |${r.non2xx > 0 ? ` ⚠ ${r.non2xx} errors` : ''}`,
    );
  }
  return lines.join('\n');
}

export function renderTable(results: Results): string {
  return [
    `HTTP, ${results.settings.connections} connections, ${results.settings.rounds} rounds (ratio = median of per-round ratios to the baseline runs around it)`,
    rowsTable(results.rows),
    '',
    `Store: Redis commands sent per first execution / replay / rejection: ${results.store_ops.redis_first} / ${results.store_ops.redis_replay} / ${results.store_ops.redis_reject}; ` +
      `PostgreSQL statements: ${results.store_ops.pg_first} / ${results.store_ops.pg_replay} / ${results.store_ops.pg_reject}`,
    `Redis bytes per record (${results.record_body_bytes}-byte result): ${results.redis_bytes_per_record} (MEMORY USAGE), ${results.redis_used_memory_per_record} (used_memory growth)`,
    `In-process overhead per call (memory store): ${results.overhead_us_per_call} µs (${results.overhead.baseline_us.toFixed(1)} → ${results.overhead.idempotent_us.toFixed(1)} µs)`,
    `Growth, ${fmt(results.growth.redis.records)} live records vs empty: Redis ${results.growth.redis.ratio.toFixed(2)}, PostgreSQL ${results.growth.postgres.ratio.toFixed(2)}`,
    `purgeExpired, ${fmt(results.purge.deleted)} expired rows in batches of ${fmt(results.purge.batch_size)}: ${results.purge.seconds} s`,
    `Load average before / after: ${results.load_average.before.join(' ')} / ${results.load_average.after.join(' ')}`,
  ].join('\n');
}

function target(ok: boolean): string {
  return ok ? 'holds' : '**missed**';
}

export function renderMarkdown(results: Results): string {
  const row = (name: string) => results.rows.find((r) => r.name === name)!;
  const ours = results.rows.filter((r) => OURS.some((o) => r.name.startsWith(`${o}-`)));
  const peers = results.rows.filter((r) => !OURS.some((o) => r.name.startsWith(`${o}-`)));
  const m = results.machine;
  const so = results.store_ops;
  const scripts = (calls: Record<string, number>) =>
    Object.entries(calls)
      .map(([cmd, n]) => `${cmd} ${Math.round(n * 100) / 100}`)
      .join(', ');
  const extra = (r: Row) => r.server_cpu_us_per_req - r.baseline_server_cpu_us_per_req;
  const redisFirst = row('redis-first');
  const memoryFirst = row('memory-first');
  const redisReplay = row('redis-replay');
  const memoryReplay = row('memory-replay');
  const floor = row('floor-2-redis-round-trips');
  const noIo = row('floor-no-io-handler');
  const pgFirst = row('postgres-first');
  const pgReplay = row('postgres-replay');
  const quiet = results.load_average.reached_quiet;
  const budget = Math.round(memoryFirst.baseline_server_cpu_us_per_req * (1 / 0.95 - 1));
  return `# Benchmark results

Generated by \`npm run bench\` on ${results.date.slice(0, 10)} (${results.date}); it took ${results.duration_s} s.

**Machine:** ${m.cpu}, ${m.cores} cores, ${m.memory_gib} GiB; ${m.os}; Node ${m.node}; Redis ${m.redis}; PostgreSQL ${m.postgresql}.
Load average (1, 5, 15 min) before the run: ${results.load_average.before.join(', ')}; after: ${results.load_average.after.join(', ')}${
    quiet === undefined
      ? ''
      : quiet
        ? ` (waited ${results.load_average.waited_for_quiet_s} s for a 1-minute load below 0.8 first)`
        : ' (the 1-minute load never fell below 0.8 within 20 minutes: measured anyway)'
  }.

**Method.** Each server is its own Node process (the library from the built \`dist/\`); the load comes from
autocannon in another process over loopback, ${results.settings.connections} connections, ${results.settings.duration_s} s per run after a
${results.settings.warmup_s} s warm-up, ${results.settings.rounds} rounds. Every variant runs between two runs of its baseline (A B A B):
its ratio is its throughput over the mean of those two, and the table gives the median over the rounds.
The operation is one tRPC mutation (\`POST /pay\`) whose handler does one Redis INCR and returns ~${results.record_body_bytes} bytes of JSON.
*first*: a fresh \`Idempotency-Key\` per request (every request runs the procedure); *replay*: ${results.settings.replay_keys} keys completed
beforehand, reused in turn (no request runs it). The machine also runs the load generator, Redis and PostgreSQL on
its 2 cores, so absolute numbers are for context: compare ratios. Server CPU is the server process's user + system
time over the run, per request; Redis commands are \`INFO commandstats\` deltas over the run, per request, the handler's INCR left out.

## trpc-idempotency

${rowsTable(ours)}

The two *floor* rows have no idempotency at all; they bound what any layer can reach here:
- **floor-2-redis-round-trips**: the baseline handler with two more Redis round trips (EXISTS before and after the
  INCR), as many as a first execution needs at least (claim, completion).
- **floor-no-io-handler**: the baseline's result made without the INCR, so the response is produced with no I/O at all,
  as a replay from the memory store is. Node then writes the body and the end of the response together with one
  \`writev\`, which costs this server more CPU than the baseline's separate writes.

## Peers

Each peer against its own baseline (the same server and handler without it).

${rowsTable(peers)}

- **@node-idempotency/core** + **storage-adapter-redis**: \`onRequest\` / \`onResponse\` (awaited) in a tRPC middleware, as its
  NestJS interceptor drives them; fingerprint of the raw body. First: SET NX + SET; replay: SET NX + GET.
- **Powertools idempotency** (\`makeIdempotent\`, \`CachePersistenceLayer\` on \`@redis/client\`) around the mutation's handler,
  keyed by the \`Idempotency-Key\` header. Run without payload validation: with \`payloadValidationJmesPath\`, its cache layer
  writes the completed record without the payload hash, so every replay fails (\`IdempotencyValidationError\`, 500);
  so it does not detect a key reused with another payload here. First: SET NX + SET; replay: SET NX + GET.
- **express-idempotency** + **express-idempotency-redis-adapter** on Express 5 (its baseline: the same Express app without it).
  First: GET + SET, then a SET after the response is sent (not awaited); replay: GET. The GET-then-SET claim is not atomic.

## Targets

| Target | Measured | |
| --- | --- | --- |
| Redis, first executions: ≥ 0.85 of baseline throughput | ${redisFirst.ratio.toFixed(2)} | ${target(redisFirst.ratio >= 0.85)} |
| Memory store, first executions: ≥ 0.95 | ${memoryFirst.ratio.toFixed(2)} | ${target(memoryFirst.ratio >= 0.95)} |
| A replay cheaper than a first execution, which runs the procedure (Redis) | ${redisReplay.ratio.toFixed(2)} vs ${redisFirst.ratio.toFixed(2)} of baseline; ${redisReplay.server_cpu_us_per_req} vs ${redisFirst.server_cpu_us_per_req} µs server CPU per request | ${target(redisReplay.rps > redisFirst.rps && redisReplay.server_cpu_us_per_req < redisFirst.server_cpu_us_per_req)} |
| A replay cheaper than the bare procedure without idempotency (Redis) | ${redisReplay.ratio.toFixed(2)} of baseline; ${redisReplay.server_cpu_us_per_req} vs ${redisReplay.baseline_server_cpu_us_per_req} µs | ${target(redisReplay.ratio >= 1)} |

**What bounds them.** A baseline request costs this server about ${memoryFirst.baseline_server_cpu_us_per_req} µs of CPU, and the server's CPU is what
limits throughput: each ratio follows the extra CPU per request (server CPU column).
- Redis, first execution: ${extra(redisFirst)} µs more per request than the baseline. The two round trips alone (the floor,
  ${floor.ratio.toFixed(2)}) cost ${extra(floor)} µs in the client (ioredis writes, reply parsing); the rest, about ${extra(redisFirst) - extra(floor)} µs, is the layer's work per
  call (with the memory store, which does no I/O, that work costs ${extra(memoryFirst)} µs). Redis itself spends ${redisFirst.redis_cpu_us_per_req} µs per request running the scripts
  on the same 2 cores (${floor.redis_cpu_us_per_req} µs for the floor's plain commands).
- Memory store: 0.95 leaves about ${budget} µs per request. In process, through a server-side caller, the layer costs
  ${results.overhead_us_per_call} µs per call (${results.overhead.fingerprint_us.toFixed(2)} µs of it the input's canonical form and SHA-256), but on the
  loaded server the same work (fingerprint, claim and completion, the result's serialization for storage, the renewal
  timer and store timeouts, about ten promise hops) costs ${extra(memoryFirst)} µs: the request's code shares the 2 cores and their
  caches with the load generator, and every step runs several times slower than in a tight loop.
- Replay: one round trip (EVALSHA) against the baseline's one (INCR), plus parsing the stored result back before tRPC
  serializes it again, so it cannot be cheaper than the bare procedure when the procedure is a single INCR. From the
  memory store a replay (${memoryReplay.ratio.toFixed(2)}) does no I/O at all and meets the \`writev\` cost of the no-I/O floor (${noIo.ratio.toFixed(2)}).
- PostgreSQL (${pgFirst.ratio.toFixed(2)} first, ${pgReplay.ratio.toFixed(2)} replay) runs on the same 2 cores: the server processes used ${pgFirst.postgres_cpu_us_per_req} µs of CPU per
  first execution (2 statements) and ${pgReplay.postgres_cpu_us_per_req} µs per replay (1 statement).

## Store cost

| | First execution | Replay | In-flight rejection |
| --- | ---: | ---: | ---: |
| Redis commands sent (EVALSHA) | ${so.redis_first} | ${so.redis_replay} | ${so.redis_reject} |
| Run inside the scripts | ${scripts(so.redis_in_scripts.first)} | ${scripts(so.redis_in_scripts.replay)} | ${scripts(so.redis_in_scripts.reject)} |
| PostgreSQL statements (round trips) | ${so.pg_first} | ${so.pg_replay} | ${so.pg_reject} |

Redis memory per completed record with a ${results.record_body_bytes}-byte result: **${results.redis_bytes_per_record} bytes** (\`MEMORY USAGE\`),
${results.redis_used_memory_per_record} bytes of \`used_memory\` growth per record over 10,000 records.
Records left by the HTTP runs (\`MEMORY USAGE\`, sampled): ${Object.entries(results.peer_redis_bytes_per_record)
    .map(([name, n]) => `${name} ${n}`)
    .join(', ')} bytes.

In-process cost of the middleware (mitata, server-side caller, memory store, \`getKey\`, a fresh key per call):
**${results.overhead_us_per_call} µs per call** (${results.overhead.baseline_us.toFixed(1)} µs without, ${results.overhead.idempotent_us.toFixed(1)} µs with; medians).

## Growth

| Store | Empty req/s | With ${fmt(results.growth.redis.records)} live records | Ratio | p99 ms empty / full |
| --- | ---: | ---: | ---: | --- |
| Redis | ${fmt(results.growth.redis.empty_rps)} | ${fmt(results.growth.redis.full_rps)} | ${results.growth.redis.ratio.toFixed(2)} | ${ms(results.growth.redis.empty_p99_ms)} / ${ms(results.growth.redis.full_p99_ms)} |
| PostgreSQL | ${fmt(results.growth.postgres.empty_rps)} | ${fmt(results.growth.postgres.full_rps)} | ${results.growth.postgres.ratio.toFixed(2)} | ${ms(results.growth.postgres.empty_p99_ms)} / ${ms(results.growth.postgres.full_p99_ms)} |

\`purgeExpired()\` over ${fmt(results.purge.deleted)} expired rows, batches of ${fmt(results.purge.batch_size)}: **${results.purge.seconds} s**
(${fmt(results.purge.rows_per_second)} rows/s).

Raw runs: \`bench/results.json\` (not committed). Run it: \`npm run bench\` (needs \`redis-server\` on the PATH and PostgreSQL at
\`DATABASE_URL\`, default \`postgres://postgres@127.0.0.1:5432/test\`; \`BENCH_ROUNDS\`, \`BENCH_DURATION\`, \`BENCH_RECORDS\`,
\`BENCH_WAIT_QUIET=1\`).
`;
}
