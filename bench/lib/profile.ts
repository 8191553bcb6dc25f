/**
 * Reads a V8 CPU profile (bench/server.ts with BENCH_PROFILE) of a server under load and says
 * where its CPU went: self time by function, and by owner (this library,
 * tRPC, the store clients, Node itself, garbage collection), per request.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface Frame {
  /** `function (file:line)`. */
  frame: string;
  owner: string;
  /** Self time per request, in µs. */
  us_per_req: number;
  /** Share of the busy (non-idle) time. */
  share: number;
}

export interface ProfileSummary {
  /** Busy CPU per request seen by the profiler, in µs (idle left out). */
  busy_us_per_req: number;
  owners: Record<string, number>;
  top: Frame[];
}

/** Who a frame belongs to, from its script URL. */
export function ownerOf(url: string, functionName: string): string {
  if (functionName === '(garbage collector)') return 'GC';
  if (functionName === '(program)' || functionName === '(root)') return 'V8 and native';
  if (url.includes('/dist/') && !url.includes('node_modules')) return 'trpc-idempotency';
  if (url.includes('@trpc/')) return 'tRPC';
  if (/node_modules\/(ioredis|@ioredis|redis-parser|cluster-key-slot|standard-as-callback|denque)\//.test(url)) {
    return 'ioredis';
  }
  if (/node_modules\/(@redis\/[a-z-]+|redis)\//.test(url)) return 'node-redis';
  if (/node_modules\/(@node-idempotency|@aws-lambda-powertools)\//.test(url)) return 'peer library';
  // mysql2 and the packages it parses and escapes with (the MySQL rows), better-sqlite3's binding (the SQLite rows).
  if (
    /node_modules\/(mysql2|sql-escaper|named-placeholders|lru\.min|generate-function|seq-queue|iconv-lite)\//.test(url)
  ) {
    return 'mysql2';
  }
  if (/node_modules\/(better-sqlite3|bindings)\//.test(url)) return 'better-sqlite3';
  if (/node_modules\/(pg|pg-[a-z-]+|postgres-[a-z-]+|drizzle-orm)\//.test(url)) return 'pg and Drizzle';
  if (url.startsWith('node:') || url === '') return 'Node';
  if (url.includes('/bench/')) return 'bench handler';
  return 'other';
}

const short = (url: string) => url.replace(/^.*\/node_modules\//, '').replace(/^file:\/\/.*\/(dist|bench)\//, '$1/');

/** Summarises a `.cpuprofile` file, for the `requests` requests served while it recorded. */
export function summariseProfile(file: string, requests: number, topN = 12): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  // Self time of a node: the time deltas of the samples that landed in it.
  const self = new Map<number, number>();
  for (const [i, id] of profile.samples.entries()) self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  const frames = new Map<string, { owner: string; us: number }>();
  const owners: Record<string, number> = {};
  let busy = 0;
  for (const [id, us] of self) {
    const { functionName, url, lineNumber } = byId.get(id)!.callFrame;
    if (functionName === '(idle)') continue;
    busy += us;
    const owner = ownerOf(url, functionName);
    owners[owner] = (owners[owner] ?? 0) + us;
    const key = `${functionName || '(anonymous)'}${url ? ` (${short(url)}:${lineNumber + 1})` : ''}`;
    const entry = frames.get(key) ?? { owner, us: 0 };
    entry.us += us;
    frames.set(key, entry);
  }
  return summaryOf(owners, frames, busy, requests, topN);
}

/**
 * A profile's summary from its time by owner and by frame and its busy time (µs, whatever the
 * profiler), per request served while it recorded.
 */
export function summaryOf(
  owners: Record<string, number>,
  frames: Map<string, { owner: string; us: number }>,
  busy: number,
  requests: number,
  topN: number,
): ProfileSummary {
  const perReq = (us: number) => Math.round((us / requests) * 10) / 10;
  return {
    busy_us_per_req: perReq(busy),
    owners: Object.fromEntries(
      Object.entries(owners)
        .sort((a, b) => b[1] - a[1])
        .map(([owner, us]) => [owner, perReq(us)]),
    ),
    top: [...frames]
      .sort((a, b) => b[1].us - a[1].us)
      .slice(0, topN)
      .map(([frame, { owner, us }]) => ({
        frame,
        owner,
        us_per_req: perReq(us),
        share: Math.round((us / busy) * 1000) / 1000,
      })),
  };
}
