/**
 * Serves docs/lambda.md's handler.ts on Node's http server: each request
 * becomes the event AWS would give the function (LAMBDA_SOURCE: a REST API,
 * payload 1.0, behind `/trpc/{proxy+}`; an HTTP API, payload 2.0, behind the
 * same route; or a function URL, payload 2.0 with a base64 body), built from
 * the header lines as received, and the handler's result the response:
 *
 * - 1.0 keeps each name as the client wrote it; `headers` holds the last
 *   value of a repeated header, `multiValueHeaders` every value;
 * - 2.0 lower-cases the names and joins a repeated header's values with ",".
 */
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

/** docs/lambda.md's handler.ts, in lambda/ in the project (not in the repository: a name tsc does not follow). */
const SNIPPET = './lambda/handler.js';
const { handler } = (await import(SNIPPET)) as { handler: (event: unknown, context: unknown) => Promise<Result> };

const source = process.env.LAMBDA_SOURCE as 'rest-api' | 'http-api' | 'function-url';

type Lines = [name: string, value: string][];

function event(method: string, url: URL, lines: Lines, body: string): Record<string, unknown> {
  const requestId = randomUUID();
  // Behind `/trpc/{proxy+}` (REST and HTTP APIs) the path keeps /trpc; a function URL has no resource path.
  const proxy = url.pathname.replace(/^\/trpc\//, '');
  const query = [...url.searchParams];
  if (source === 'rest-api') {
    const headers: Record<string, string> = {};
    const multiValueHeaders: Record<string, string[]> = {};
    for (const [name, value] of lines) {
      headers[name] = value;
      (multiValueHeaders[name] ??= []).push(value);
    }
    return {
      resource: '/trpc/{proxy+}',
      path: url.pathname,
      httpMethod: method,
      headers,
      multiValueHeaders,
      queryStringParameters: query.length > 0 ? Object.fromEntries(query) : null,
      multiValueQueryStringParameters:
        query.length > 0 ? Object.fromEntries(query.map(([name, value]) => [name, [value]])) : null,
      pathParameters: { proxy },
      stageVariables: null,
      requestContext: {
        domainName: 'api.example.com',
        httpMethod: method,
        path: `/prod${url.pathname}`,
        stage: 'prod',
        requestId,
      },
      body: body === '' ? null : body,
      isBase64Encoded: false,
    };
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of lines) {
    const lower = name.toLowerCase();
    headers[lower] = headers[lower] === undefined ? value : `${headers[lower]},${value}`;
  }
  const functionUrl = source === 'function-url';
  const path = functionUrl ? `/${proxy}` : url.pathname;
  return {
    version: '2.0',
    routeKey: functionUrl ? '$default' : `${method} /trpc/{proxy+}`,
    rawPath: path,
    rawQueryString: url.search.replace(/^\?/, ''),
    headers,
    ...(functionUrl ? {} : { pathParameters: { proxy } }),
    requestContext: {
      domainName: 'api.example.com',
      requestId,
      http: { method, path, protocol: 'HTTP/1.1', sourceIp: '192.0.2.1', userAgent: headers['user-agent'] ?? '' },
    },
    ...(body === '' ? {} : { body: functionUrl ? Buffer.from(body).toString('base64') : body }),
    isBase64Encoded: functionUrl && body !== '',
  };
}

interface Result {
  statusCode: number;
  headers?: Record<string, string | number | boolean>;
  multiValueHeaders?: Record<string, (string | number | boolean)[]>;
  body?: string;
  isBase64Encoded?: boolean;
}

const server = createServer(async (req, res) => {
  try {
    const lines: Lines = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push([req.rawHeaders[i]!, req.rawHeaders[i + 1]!]);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const url = new URL(req.url!, 'http://api.example.com');
    const input = event(req.method!, url, lines, Buffer.concat(chunks).toString());
    const context = { awsRequestId: randomUUID(), functionName: 'trpc', getRemainingTimeInMillis: () => 30_000 };
    const result = await handler(input, context);
    for (const [name, value] of Object.entries(result.headers ?? {})) res.setHeader(name, String(value));
    for (const [name, values] of Object.entries(result.multiValueHeaders ?? {}))
      res.setHeader(name, values.map(String));
    res.writeHead(result.statusCode);
    res.end(result.body === undefined ? '' : Buffer.from(result.body, result.isBase64Encoded ? 'base64' : 'utf8'));
  } catch (error) {
    res.writeHead(502).end(String(error));
  }
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log(`listening on ${process.env.PORT}`));
