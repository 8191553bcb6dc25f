import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  /** Response headers, names in lower case, each with every value it was sent with. */
  headers: Record<string, string[]>;
  body: string;
}

/** One request header: its value as text (sent as latin1, one byte per char) or as raw bytes. */
export type RawHeader = [name: string, value: string | Uint8Array];

/**
 * An HTTP/1.1 request written byte by byte on a TCP socket, so a test can send
 * what `fetch` refuses to: control characters, raw non-ASCII bytes, line
 * breaks inside a value, repeated or folded headers. `Content-Length` and
 * `Connection: close` come first, so bytes injected into a later header cannot
 * drop them.
 */
export function rawRequest(opts: { method?: string; path: string; headers?: RawHeader[]; body?: string }): Buffer {
  const body = Buffer.from(opts.body ?? '', 'utf8');
  const parts: Buffer[] = [
    Buffer.from(
      `${opts.method ?? 'POST'} ${opts.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\nConnection: close\r\n`,
      'latin1',
    ),
  ];
  for (const [name, value] of opts.headers ?? []) {
    parts.push(
      Buffer.from(`${name}: `, 'latin1'),
      typeof value === 'string' ? Buffer.from(value, 'latin1') : Buffer.from(value),
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from('\r\n'), body);
  return Buffer.concat(parts);
}

/** Sends raw bytes to 127.0.0.1:`port` and parses the first response; the server closes the connection. */
export function sendRaw(port: number, bytes: Buffer, timeoutMs = 15_000): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(
        new Error(
          `no complete response within ${timeoutMs} ms: ${Buffer.concat(chunks).toString('latin1').slice(0, 300)}`,
        ),
      );
    }, timeoutMs);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {}); // a reset after the response is normal when the server refuses the rest
    socket.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const parsed = parseResponse(text);
      if (parsed === undefined) reject(new Error(`no HTTP response: ${JSON.stringify(text.slice(0, 300))}`));
      else resolve(parsed);
    });
    // not end(): a half-closed request counts as aborted for some servers; Connection: close ends it
    socket.write(bytes);
  });
}

function parseResponse(text: string): RawResponse | undefined {
  const end = text.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
  const match = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '');
  if (match === null) return undefined;
  const headers: Record<string, string[]> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    (headers[name] ??= []).push(line.slice(colon + 1).trim());
  }
  let body = text.slice(end + 4);
  if (headers['transfer-encoding']?.includes('chunked')) body = dechunk(body);
  else if (headers['content-length'] !== undefined) body = body.slice(0, Number(headers['content-length'][0]));
  return { status: Number(match[1]), headers, body: Buffer.from(body, 'latin1').toString('utf8') };
}

function dechunk(text: string): string {
  let out = '';
  let at = 0;
  for (;;) {
    const lineEnd = text.indexOf('\r\n', at);
    if (lineEnd < 0) return out;
    const size = parseInt(text.slice(at, lineEnd), 16);
    if (!(size > 0)) return out;
    out += text.slice(lineEnd + 2, lineEnd + 2 + size);
    at = lineEnd + 2 + size + 2;
  }
}
