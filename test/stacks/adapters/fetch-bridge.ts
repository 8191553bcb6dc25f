/**
 * Serves docs/adapters.md's fetch.ts `handler` (a `Request` in, a `Response`
 * out, as Bun, Deno or Hono call it) on Node's http server: each request
 * becomes a `Request` whose headers are every header line received, in order
 * (a header sent twice is appended twice, as a runtime's `Headers` holds it).
 */
import { createServer } from 'node:http';

/** docs/adapters.md's fetch.ts, beside this file in the project (not in the repository: a name tsc does not follow). */
const SNIPPET = './fetch.js';
const { handler } = (await import(SNIPPET)) as { handler: (req: Request) => Promise<Response> };

const server = createServer(async (req, res) => {
  try {
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers,
      body: hasBody ? Buffer.concat(chunks) : undefined,
    });
    const response = await handler(request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    res.end(Buffer.from(await response.arrayBuffer()));
  } catch (error) {
    res.writeHead(502).end(String(error));
  }
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`listening on ${process.env.PORT}`));
