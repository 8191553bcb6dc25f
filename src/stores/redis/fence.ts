import type { RedisConnection } from './client.js';

// Where the restart fence's markers live (see FENCE in scripts.ts): one
// per Redis on a single node or Sentinel, one per slot on a Cluster, since a
// script may only touch keys of its record's slot and each master can lose its
// data alone.

const SLOTS = 16_384;

/**
 * The Redis Cluster slot of a key: CRC16 (XMODEM: polynomial 0x1021, initial
 * value 0) of its hash tag (the part between the first `{` and the next `}`,
 * when not empty) or of the whole key, modulo 16384. As in the Redis Cluster
 * specification; test/stores/redis-fence.test.ts checks it against a Cluster's
 * own `CLUSTER KEYSLOT`. (Written here rather than taken from cluster-key-slot,
 * which ships no types and would be a runtime dependency for every user.)
 */
export function keySlot(key: string): number {
  let bytes = Buffer.from(key);
  const open = bytes.indexOf(0x7b); // {
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % SLOTS;
}

let slotTags: string[] | undefined;

/** A short hash tag of each slot (`slotTagOf()[slot]` hashes to `slot`): found once, by counting up. */
function slotTagOf(): string[] {
  if (slotTags !== undefined) return slotTags;
  const tags = new Array<string>(SLOTS);
  let found = 0;
  for (let n = 0; found < SLOTS; n++) {
    const tag = n.toString(36);
    const slot = keySlot(tag);
    if (tags[slot] === undefined) {
      tags[slot] = tag;
      found++;
    }
  }
  slotTags = tags;
  return tags;
}

export interface FenceMarkers {
  /** The marker a record key's scripts read. */
  of(recordKey: string): string;
  /** Every marker (one, or one per slot on a Cluster). */
  all(): string[];
}

/** The fence markers of a store with this prefix on this client. */
export function fenceMarkers(connection: RedisConnection, prefix: string): FenceMarkers {
  if (!connection.isCluster) {
    const marker = `${prefix}fence`;
    return { of: () => marker, all: () => [marker] };
  }
  // The client's keyPrefix (ioredis adds it to every key) is part of the key Redis hashes.
  const { keyPrefix } = connection;
  const markerOfSlot = (slot: number) => `${prefix}{${slotTagOf()[slot]}}:fence`;
  return {
    of: (recordKey) => markerOfSlot(keySlot(keyPrefix + recordKey)),
    all: () => Array.from({ length: SLOTS }, (_, slot) => markerOfSlot(slot)),
  };
}
