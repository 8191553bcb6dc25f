/**
 * The tables of bench/RESULTS.md beside the saturation runs: store cost, in process, the fingerprint
 * against its parse, growth and purge.
 */
import type { Growth } from './aggregate.js';
import { fmt, ms, range, table, us } from './markdown.js';
import type { FingerprintCost, Results } from './results.js';

/** The fingerprint against the parse of its body, per shape (bench/fingerprint.ts). */
export function fingerprintTable(cost: FingerprintCost): string {
  return table(
    ['Shape', 'Body', 'Body bytes', 'Parse µs', 'Fingerprint µs', 'Fingerprint / parse (rounds)'],
    'llrrrr',
    cost.rows.map((r) => [
      r.shape,
      r.transport,
      fmt(r.body_bytes),
      us(r.parse_us),
      `${us(r.fingerprint_us)}${r.refused ? ' (refusal)' : ''}`,
      `**${r.ratio.toFixed(2)}**${r.ratios.length < 2 ? '' : ` (${range(r.ratios, 2)})`}`,
    ]),
  );
}

export function storeTables(results: Results): string {
  const { redis, postgres } = results.store_cost;
  const scripts = (calls: Record<string, number>) =>
    Object.entries(calls)
      .map(([cmd, n]) => `${cmd} ${Math.round(n * 100) / 100}`)
      .join(', ');
  const pgWait = (ms: number) => postgres.waits.find((wait) => wait.ms === ms)?.statements ?? 'not measured';
  return [
    table(
      [
        '',
        'First execution',
        'Replay',
        'In-flight rejection',
        ...redis.waits.map((wait) => `Waiting duplicate (${fmt(wait.ms)} ms)`),
      ],
      `lrrr${'r'.repeat(redis.waits.length)}`,
      [
        ['Redis commands sent (EVALSHA)', redis.first, redis.replay, redis.reject, ...redis.waits.map((w) => w.sent)],
        [
          'Run inside the scripts',
          ...[redis.first_in_scripts, redis.replay_in_scripts, redis.reject_in_scripts].map(scripts),
          ...redis.waits.map((wait) => scripts(wait.in_scripts)),
        ],
        [
          'PostgreSQL statements (round trips)',
          postgres.first,
          postgres.replay,
          postgres.reject,
          ...redis.waits.map((wait) => pgWait(wait.ms)),
        ],
      ],
    ),
    '',
    table(['Redis bytes per completed record', 'Bytes'], 'lr', [
      [`\`MEMORY USAGE\`, ${redis.body_bytes}-byte result`, redis.memory_usage_bytes],
      ['`used_memory` growth per record over 10,000', redis.used_memory_bytes_per_record],
      ...Object.entries(results.peer_redis_bytes_per_record).map(([name, n]) => [
        `left by the HTTP runs: ${name} (\`MEMORY USAGE\`, sampled)`,
        n,
      ]),
    ]),
  ].join('\n');
}

export function inProcessTable(results: Results): string {
  const o = results.overhead;
  return table(['In process (mitata, server-side caller, memory store, medians)', 'µs per call'], 'lr', [
    ['without the layer', o.baseline_us.toFixed(1)],
    ['with it, a fresh key per call', o.idempotent_us.toFixed(1)],
    ['**added by a first execution**', `**${results.overhead_us_per_call}**`],
    ['added by a replay (the same key every call)', o.replay_overhead_us_per_call.toFixed(1)],
    [
      'added by the least a layer does (`minimalLayer`, bench/lib/inprocess.ts)',
      o.minimal_overhead_us_per_call.toFixed(1),
    ],
    ["the input's fingerprint (canonical form and SHA-256)", o.fingerprint_us.toFixed(2)],
  ]);
}

export function growthTable(results: Results): string {
  const { redis, postgres } = results.growth;
  const p = results.purge;
  const row = (store: string, g: Growth) => [
    store,
    fmt(g.empty_rps),
    fmt(g.full_rps),
    g.ratio.toFixed(2),
    `${ms(g.empty_p99_ms)} / ${ms(g.full_p99_ms)}`,
  ];
  return [
    table(
      [
        'First executions',
        'Empty store req/s',
        `With ${fmt(redis.records)} live records`,
        'Ratio',
        'p99 ms empty / full',
      ],
      'lrrrl',
      [row('Redis', redis), row('PostgreSQL', postgres)],
    ),
    '',
    table(['`purgeExpired()`', 'Rows', 'Batch', 'Seconds', 'Rows/s'], 'lrrrr', [
      ['expired rows', fmt(p.deleted), fmt(p.batch_size), p.seconds, fmt(p.rows_per_second)],
    ]),
  ].join('\n');
}
