import { createHash } from 'node:crypto';
import {
  CLAIM_REPLY,
  COMPLETE_REPLY,
  DONE_REPLY,
  SAVE_STEP_REPLY,
  SEEN_STATE_CODE,
  STATE_CODE,
} from '../../core/protocol/codes.js';

/**
 * The Redis store's state transitions, one atomic script each.
 *
 * A record is one hash (so it lives in one slot of a Redis Cluster) with the
 * fields:
 *   s  state: 'p' in progress, 'c' completed, 'f' failed (a stored error)
 *   f  request fingerprint
 *   t  claim token: fences complete, release and extend (kept once finished, so a
 *      completion re-sent by the same holder is recognised)
 *   b  serialized outcome (only once finished)
 *   w  '1' if a request waits for this claim to settle (only while in progress)
 *   c  when the claim that holds the record (or stored its outcome) took it: ms, Redis's
 *      clock (kept once finished; absent on records of versions before it)
 *   l  the lockTtl of the claim's last take or renewal: with the TTL, when it was last
 *      renewed (left on a finished record, where it means nothing). Both are for operators
 *      (admin.ts).
 * Expiry is the key's own TTL: lockTtl while in progress, ttl once finished.
 *
 * The steps an operation recorded (see SAVE_STEP) are a second hash beside it,
 * `<record key>:steps`, in the same Cluster slot (the hash tag is the record's):
 *   f  the fingerprint of the request that recorded them
 *   n  how many there are
 *   k<i>, b<i>  name and serialized result of step i (from 0)
 * It outlives the record's claim (a release or an expiry keeps it), lives
 * for ttl after its last step, and is deleted by the completion that stores
 * the operation's outcome.
 *
 * The restart fence (`restartFence`, see FENCE below) is one more key the
 * scripts read, given last in KEYS when the fence is on: a marker written once
 * by `initialize()`, in the record's Cluster slot. Absent, it means the data
 * set is new or was lost (an empty restart, a flush); its value is '0', or the
 * time (ms, Redis's clock) at which a script found it missing.
 *
 * The state letters and reply codes below are those of core/protocol/codes.ts,
 * interpolated into the Lua, and the rules those of core/protocol/record.ts.
 */

export interface RedisScript {
  readonly source: string;
  readonly sha: string;
}

function script(source: string): RedisScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/** A code as a Lua string literal. */
const lua = (code: string) => `'${code}'`;
const IN_PROGRESS = lua(STATE_CODE.in_progress);
const ACQUIRED = lua(CLAIM_REPLY.acquired);
const LATE = lua(CLAIM_REPLY.late);
const FENCE_UP = lua(CLAIM_REPLY.fenced);
const ABSENT = lua(SEEN_STATE_CODE.absent);
const { stored: STORED, held: HELD, finished: FINISHED } = COMPLETE_REPLY;
const { stored: STEP_STORED, fenced: STEP_FENCED, conflict: STEP_CONFLICT } = SAVE_STEP_REPLY;
const { yes: DONE, no: NOT_DONE } = DONE_REPLY;

/**
 * `clock()`: Redis's clock in ms, for the scripts that are not on a request's path (defining a
 * function costs every call of a script; CLAIM reads TIME inline).
 */
const CLOCK = `
local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
`;

/**
 * The restart fence, shared by the scripts that can meet an absent record.
 * `fenced(marker, now, window)` answers the time until which claims of absent
 * records are refused, or nil when the store remembers. A missing marker means
 * Redis lost what it held: the first script to see that writes `now` into it,
 * so for `window` ms (the caller's lockTtl) from then an absent record may be
 * one a holder still runs, whose renewal or completion has not landed yet.
 */
const FENCE = `${CLOCK}
local function fenced(marker, now, window)
  local lost = redis.call('GET', marker)
  if not lost then
    redis.call('SET', marker, string.format('%d', now))
    lost = now
  end
  local reopen = tonumber(lost) + window
  if now < reopen then return reopen end
  return nil
end
`;

/**
 * KEYS[1] record key, KEYS[2] its steps key, KEYS[3] the fence marker (only with `restartFence`)
 * ARGV[1] token, ARGV[2] fingerprint, ARGV[3] lockTtl (ms), ARGV[4] deadline (ms since the epoch, by
 * Redis's clock) or '' for none, ARGV[5] '1' if the caller will wait (absent otherwise: one argument
 * less to send and parse on every claim that does not)
 * Returns {'p', fingerprint} when another claim is in flight (a waiter's gets its pttl too, below). When
 * finished: {state, body} if the fingerprints match (the caller knows its own), else {state, fingerprint, 0}
 * (no point shipping the body). When the
 * record is absent, or is this token's own live claim (sent again by the client after a
 * reconnect), it reads Redis's clock: {'a', time} when claimed, {'l', time} when the deadline
 * has passed (nothing changed: the caller gave up). Only taking the record needs the clock.
 * A claim that takes the record gets its recorded steps too: {'a', time, steps hash as a flat list}.
 * With the fence, a claim of an absent record while the fence is up takes nothing: {'r', time, reopen}.
 * Taking the record sets its claim time `c` (now) and `l` (lockTtl); this token's claim sent again
 * keeps its `c`.
 * A waiting claim (ARGV[5] '1') of another's in-progress record with its fingerprint (one with another
 * is refused, it never waits) sets the waiter flag `w` only when it is absent: one write per held
 * claim, however many waiters check it and however often. It is answered {'p', fingerprint, pttl}:
 * the waiter checks again when the holder's claim expires unless renewed (a crashed holder publishes nothing).
 */
const claim = (fence: string) =>
  script(`${fence}
local rec = redis.call('HMGET', KEYS[1], 's', 'f', 'b', 't', 'w')
if rec[1] and not (rec[1] == ${IN_PROGRESS} and rec[4] == ARGV[1]) then
  if rec[1] == ${IN_PROGRESS} then
    if ARGV[5] == '1' and rec[2] == ARGV[2] then
      if not rec[5] then redis.call('HSET', KEYS[1], 'w', '1') end
      return {${IN_PROGRESS}, rec[2], redis.call('PTTL', KEYS[1])}
    end
    return {${IN_PROGRESS}, rec[2]}
  end
  if rec[2] ~= ARGV[2] then return {rec[1], rec[2], 0} end
  return {rec[1], rec[3]}
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[4] ~= '' and now > tonumber(ARGV[4]) then return {${LATE}, now} end
if KEYS[3] and not rec[1] then
  local reopen = fenced(KEYS[3], now, tonumber(ARGV[3]))
  if reopen then return {${FENCE_UP}, now, reopen} end
end
if rec[1] then
  redis.call('HSET', KEYS[1], 's', ${IN_PROGRESS}, 'f', ARGV[2], 't', ARGV[1], 'l', ARGV[3])
else
  redis.call('HSET', KEYS[1], 's', ${IN_PROGRESS}, 'f', ARGV[2], 't', ARGV[1], 'c', now, 'l', ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local steps = redis.call('HGETALL', KEYS[2])
if #steps > 0 then return {${ACQUIRED}, now, steps} end
return {${ACQUIRED}, now}
`);

/**
 * KEYS[1] record key, then the fence marker (only with `restartFence`), then (only when the operation
 * used steps) its steps key, deleted once the outcome is stored
 * ARGV[1] token, ARGV[2] final state ('c' or 'f'), ARGV[3] body, ARGV[4] ttl (ms),
 * ARGV[5] notify channel, ARGV[6] fingerprint, ARGV[7] notify message (the record key
 * as the store names it: KEYS[1] carries the client's keyPrefix, if it has one; absent when the
 * client has none, KEYS[1] is then the message)
 * Stores the outcome if the token holds the claim, or if the record is gone (expired,
 * evicted, lost in a restart: no one else holds or ran it). The token stays on the record,
 * so a completion sent twice (a client's re-send after a reconnect) succeeds again without
 * change. Returns 1 if stored, 2 if another token's claim is live, 0 if another outcome is there.
 * With the fence, a completion that finds the record and the marker gone raises the fence.
 * The claim's time `c` stays, and so does its lease `l`: deleting it would cost every first
 * execution a command, and no one reads it on a finished record. The waiter flag goes. A completion
 * of its own live claim writes the state and the body only: the claim wrote the same fingerprint
 * and token.
 */
const complete = (fence: string) =>
  script(`${fence}
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'w')
if rec[1] then
  if rec[2] ~= ARGV[1] then
    if rec[1] == ${IN_PROGRESS} then return ${HELD} end
    return ${FINISHED}
  end
  if rec[1] ~= ${IN_PROGRESS} then return ${STORED} end
  if rec[3] then redis.call('HDEL', KEYS[1], 'w') end
  redis.call('HSET', KEYS[1], 's', ARGV[2], 'b', ARGV[3])
else
${fence === '' ? '' : '  fenced(KEYS[2], clock(), 0)\n'}  redis.call('HSET', KEYS[1], 's', ARGV[2], 'b', ARGV[3], 'f', ARGV[6], 't', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local steps = KEYS[${fence === '' ? 2 : 3}]
if steps then redis.call('DEL', steps) end
if rec[3] then redis.call('PUBLISH', ARGV[5], ARGV[7] or KEYS[1]) end
return ${STORED}
`);

/**
 * KEYS[1] record key
 * ARGV[1] token, ARGV[2] notify channel, ARGV[3] notify message (as for COMPLETE)
 * Returns 1 if deleted, 0 if the token no longer holds the claim.
 */
const release = () =>
  script(`
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'w')
if rec[1] ~= ${IN_PROGRESS} or rec[2] ~= ARGV[1] then return ${NOT_DONE} end
redis.call('DEL', KEYS[1])
if rec[3] then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return ${DONE}
`);

/**
 * KEYS[1] record key, KEYS[2] the fence marker (only with `restartFence`)
 * ARGV[1] token, ARGV[2] lockTtl (ms), ARGV[3] fingerprint
 * Returns 1 if renewed, 0 if the token no longer holds the claim. A renewal records its lockTtl (`l`),
 * written only when it differs from the last one (a renewal with the same lockTtl writes nothing but
 * the TTL, as before `l` existed).
 * With the fence, a renewal that finds the record gone while the fence is up (or raises it)
 * recreates the claim: Redis lost it, and no one else can have taken it in the meantime. The
 * recreated claim's time `c` is now (the first was lost with the record).
 */
const extend = (fence: string) =>
  script(`${fence}
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'l')
if rec[1] == ${IN_PROGRESS} and rec[2] == ARGV[1] then
  if rec[3] ~= ARGV[2] then redis.call('HSET', KEYS[1], 'l', ARGV[2]) end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return ${DONE}
end
if rec[1] or not KEYS[2] then return ${NOT_DONE} end
local now = clock()
if not fenced(KEYS[2], now, tonumber(ARGV[2])) then return ${NOT_DONE} end
redis.call('HSET', KEYS[1], 's', ${IN_PROGRESS}, 'f', ARGV[3], 't', ARGV[1], 'c', now, 'l', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return ${DONE}
`);

/**
 * KEYS[1] record key, KEYS[2] its steps key, KEYS[3] the fence marker (only with `restartFence`)
 * ARGV[1] token, ARGV[2] fingerprint, ARGV[3] step index (from 0), ARGV[4] name, ARGV[5] body,
 * ARGV[6] ttl (ms), ARGV[7] lockTtl (ms)
 * Records step ARGV[3] if the token holds the live claim and the steps recorded end right before it.
 * Returns 1 if stored (or already there under the same name: a save sent twice), 0 if the token no
 * longer holds the claim, 2 if the recorded steps do not end right before it.
 * With the fence, a save that finds the record gone while the fence is up recreates the claim, as
 * EXTEND does (with `c` and `l`). The steps recorded before the loss are gone with it: a step after them is not
 * recorded (1 all the same: the run goes on, and only a retry after a crash of this holder too
 * would run those steps again).
 */
const saveStep = (fence: string) =>
  script(`${fence}
local rec = redis.call('HMGET', KEYS[1], 's', 't')
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local i = tonumber(ARGV[3])
if rec[1] ~= ${IN_PROGRESS} or rec[2] ~= ARGV[1] then
  if rec[1] or not KEYS[3] then return ${STEP_FENCED} end
  local now = clock()
  if not fenced(KEYS[3], now, tonumber(ARGV[7])) then return ${STEP_FENCED} end
  redis.call('HSET', KEYS[1], 's', ${IN_PROGRESS}, 'f', ARGV[2], 't', ARGV[1], 'c', now, 'l', ARGV[7])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  if i > n then return ${STEP_STORED} end
end
if i < n then
  if redis.call('HGET', KEYS[2], 'k' .. ARGV[3]) == ARGV[4] then return ${STEP_STORED} end
  return ${STEP_CONFLICT}
end
if i > n then return ${STEP_CONFLICT} end
redis.call('HSET', KEYS[2], 'f', ARGV[2], 'n', i + 1, 'k' .. ARGV[3], ARGV[4], 'b' .. ARGV[3], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return ${STEP_STORED}
`);

export interface RedisScripts {
  readonly CLAIM: RedisScript;
  readonly COMPLETE: RedisScript;
  readonly RELEASE: RedisScript;
  readonly EXTEND: RedisScript;
  readonly SAVE_STEP: RedisScript;
}

/**
 * The scripts of a store without the restart fence: the fence's functions are
 * left out, so that a store without it runs no more Lua than before it existed
 * (its branches, behind `KEYS[n]` checks, are never reached).
 */
export const UNFENCED: RedisScripts = {
  CLAIM: claim(''),
  COMPLETE: complete(''),
  RELEASE: release(),
  EXTEND: extend(''),
  SAVE_STEP: saveStep(''),
};

/** The scripts of a store with `restartFence`. */
export const FENCED: RedisScripts = {
  CLAIM: claim(FENCE),
  COMPLETE: complete(FENCE),
  RELEASE: UNFENCED.RELEASE,
  EXTEND: extend(FENCE),
  SAVE_STEP: saveStep(FENCE),
};

export const { CLAIM, COMPLETE, RELEASE, EXTEND, SAVE_STEP } = UNFENCED;

// The operator's scripts (admin.ts): reads, and a delete of a record as the operator saw
// it. None of them touches the restart fence's marker, with the fence or without.

/** The part of a record an operator reads: Redis's clock, the fields, the TTL and the outcome's size. */
const SUMMARY_LUA = `${CLOCK}
local now = clock()
local rec = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'c', 'l', 'w')
if not rec[1] then return {now} end
return {now, rec, redis.call('PTTL', KEYS[1]), redis.call('HSTRLEN', KEYS[1], 'b')}
`;

/**
 * KEYS[1] record key
 * Returns {time} when there is no record, else {time, {s, f, t, c, l, w}, pttl, outcome bytes}.
 */
const summary = () => script(SUMMARY_LUA);

/**
 * KEYS[1] record key, KEYS[2] its steps key
 * ARGV[1] '1' to read the outcome too
 * Returns {time, record, steps, steps pttl, body}: record as SUMMARY answers it after its time
 * ({} when absent), steps a flat list of each step's name and result bytes, body nil unless asked.
 */
const inspect = () =>
  script(`${CLOCK}
local now = clock()
local rec = redis.call('HMGET', KEYS[1], 's', 'f', 't', 'c', 'l', 'w')
local record = {}
local body = false
if rec[1] then
  record = {rec, redis.call('PTTL', KEYS[1]), redis.call('HSTRLEN', KEYS[1], 'b')}
  if ARGV[1] == '1' then body = redis.call('HGET', KEYS[1], 'b') end
end
local n = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
local steps = {}
for i = 0, n - 1 do
  steps[#steps + 1] = redis.call('HGET', KEYS[2], 'k' .. i) or ''
  steps[#steps + 1] = redis.call('HSTRLEN', KEYS[2], 'b' .. i)
end
local stepsTtl = -2
if n > 0 then stepsTtl = redis.call('PTTL', KEYS[2]) end
return {now, record, steps, stepsTtl, body}
`);

/**
 * KEYS[1] record key, KEYS[2] its steps key (only when they go too)
 * ARGV[1] the state the operator saw ('a' absent, 'p', 'c', 'f'), ARGV[2] its token,
 * ARGV[3] notify channel, ARGV[4] notify message (as for RELEASE), ARGV[5] the latest expiry (ms,
 * Redis's clock) the record may have (a claim renewed since is kept), or ''
 * Deletes the record if it is still in that state with that token (absent: deletes nothing but
 * the steps), and the steps with KEYS[2]. A deleted record is published on the settled channel, as
 * a release publishes it, whether or not a waiter flagged it (`w`): an operator's delete is rare,
 * and a listener that subscribed without claiming is told too. Returns 1 if something was
 * deleted, else 0.
 */
const forget = () =>
  script(`${CLOCK}
local rec = redis.call('HMGET', KEYS[1], 's', 't')
local deleted = 0
if ARGV[1] == ${ABSENT} then
  if rec[1] then return ${NOT_DONE} end
else
  if rec[1] ~= ARGV[1] or rec[2] ~= ARGV[2] then return ${NOT_DONE} end
  if ARGV[5] ~= '' then
    local expires = clock() + redis.call('PTTL', KEYS[1])
    if expires > tonumber(ARGV[5]) then return ${NOT_DONE} end
  end
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], ARGV[4])
  deleted = 1
end
if KEYS[2] then deleted = deleted + redis.call('DEL', KEYS[2]) end
if deleted > 0 then return ${DONE} end
return ${NOT_DONE}
`);

export interface RedisAdminScripts {
  readonly SUMMARY: RedisScript;
  readonly INSPECT: RedisScript;
  readonly FORGET: RedisScript;
}

/** The operator's scripts, the same with the restart fence or without. */
export const ADMIN: RedisAdminScripts = { SUMMARY: summary(), INSPECT: inspect(), FORGET: forget() };
