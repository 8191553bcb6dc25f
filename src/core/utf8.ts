/**
 * How many bytes `text` takes in UTF-8, without Buffer or an encoded copy: a
 * lone surrogate counts as U+FFFD's 3 bytes, as Buffer.byteLength and
 * TextEncoder count it. Portable (the client, and #platform's web.ts).
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) bytes += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      // a pair: 4 bytes for its 2 units; a high surrogate alone: 3
      bytes += 2;
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    } else bytes += 2;
  }
  return bytes;
}

/** Whether `text` takes more than `max` bytes in UTF-8 (a UTF-16 unit is 1 to 3 bytes: the length decides most). */
export function utf8LengthExceeds(text: string, max: number): boolean {
  if (text.length > max) return true;
  if (text.length * 3 <= max) return false;
  return utf8Length(text) > max;
}
