import { createHash } from 'node:crypto';

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
 * Expiry is the key's own TTL: lockTtl while in progress, ttl once finished.
 */

export interface RedisScript {
  readonly source: string;
  readonly sha: string;
}

function script(source: string): RedisScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS[1] record key
 * ARGV[1] token, ARGV[2] fingerprint, ARGV[3] lockTtl (ms), ARGV[4] '1' if the caller will wait,
 * ARGV[5] deadline (ms since the epoch, by Redis's clock) or '' for none
 * Returns {'p', fingerprint} when another claim is in flight; {state, fingerprint[, body]} when
 * finished, the body only if the fingerprints match (no point shipping it otherwise). When the
 * record is absent, or is this token's own live claim (sent again by the client after a
 * reconnect), it reads Redis's clock: {'a', time} when claimed, {'l', time} when the deadline
 * has passed (nothing changed: the caller gave up). Only taking the record needs the clock.
 */
export const CLAIM = script(`
local rec = redis.call('HMGET', KEYS[1], 's', 'f', 'b', 't')
if rec[1] and not (rec[1] == 'p' and rec[4] == ARGV[1]) then
  if rec[1] == 'p' then
    if ARGV[4] == '1' then redis.call('HSET', KEYS[1], 'w', '1') end
    return {'p', rec[2]}
  end
  if rec[2] ~= ARGV[2] then return {rec[1], rec[2]} end
  return {rec[1], rec[2], rec[3]}
end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
if ARGV[5] ~= '' and now > tonumber(ARGV[5]) then return {'l', now} end
redis.call('HSET', KEYS[1], 's', 'p', 'f', ARGV[2], 't', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'a', now}
`);

/**
 * KEYS[1] record key
 * ARGV[1] token, ARGV[2] final state ('c' or 'f'), ARGV[3] body, ARGV[4] ttl (ms),
 * ARGV[5] notify channel, ARGV[6] fingerprint, ARGV[7] notify message (the record key
 * as the store names it: KEYS[1] carries the client's keyPrefix, if it has one)
 * Stores the outcome if the token holds the claim, or if the record is gone (expired,
 * evicted, lost in a restart: no one else holds or ran it). The token stays on the record,
 * so a completion sent twice (a client's re-send after a reconnect) succeeds again without
 * change. Returns 1 if stored, 2 if another token's claim is live, 0 if another outcome is there.
 */
export const COMPLETE = script(`
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'w')
if rec[1] then
  if rec[2] ~= ARGV[1] then
    if rec[1] == 'p' then return 2 end
    return 0
  end
  if rec[1] ~= 'p' then return 1 end
  redis.call('HDEL', KEYS[1], 'w')
end
redis.call('HSET', KEYS[1], 's', ARGV[2], 'b', ARGV[3], 'f', ARGV[6], 't', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if rec[3] then redis.call('PUBLISH', ARGV[5], ARGV[7]) end
return 1
`);

/**
 * KEYS[1] record key
 * ARGV[1] token, ARGV[2] notify channel, ARGV[3] notify message (as for COMPLETE)
 * Returns 1 if deleted, 0 if the token no longer holds the claim.
 */
export const RELEASE = script(`
local rec = redis.call('HMGET', KEYS[1], 's', 't', 'w')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if rec[3] then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return 1
`);

/**
 * KEYS[1] record key
 * ARGV[1] token, ARGV[2] lockTtl (ms)
 * Returns 1 if renewed, 0 if the token no longer holds the claim.
 */
export const EXTEND = script(`
local rec = redis.call('HMGET', KEYS[1], 's', 't')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`);
