import { startPipe } from './proxy.js';

export interface DropProxy {
  /** `http://127.0.0.1:<port>`: point the client here. */
  url: string;
  /** Responses dropped so far. */
  readonly dropped: number;
  /** Drops the next `count` responses too. */
  dropNext(count: number): void;
  close(): Promise<void>;
}

/**
 * A real TCP proxy in front of an HTTP server that drops responses: when the
 * first bytes of a response come back from the server (so the server has
 * finished the call), it resets both connections instead of passing them on.
 * The client sees a connection reset, exactly as if the network had failed
 * after the work was done. The first `drop` responses are dropped, then it
 * passes everything through.
 */
export async function startDropProxy(options: { targetUrl: string; drop?: number }): Promise<DropProxy> {
  const target = new URL(options.targetUrl);
  let toDrop = options.drop ?? 1;
  let dropped = 0;
  const pipe = await startPipe({ port: Number(target.port), host: target.hostname }, (client, upstream) => ({
    fromServer(chunk) {
      if (toDrop > 0) {
        toDrop--;
        dropped++;
        client.resetAndDestroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    },
  }));
  return {
    url: `http://127.0.0.1:${pipe.port}`,
    get dropped() {
      return dropped;
    },
    dropNext(count) {
      toDrop += count;
    },
    close: pipe.close,
  };
}
