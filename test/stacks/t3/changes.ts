/**
 * What docs/create-t3-app.md tells a create-t3-app user to do, as data: the
 * files of our own copied from example-app/t3/, and the edits to t3's files,
 * each an exact replacement of t3's text that fails when that text is not
 * there (a new create-t3-app release that changed it must fail this test,
 * not pass without the change). The `find` strings are the only text of
 * t3's in this repository: the few lines each edit replaces.
 */

export type VariantName = 'react-query' | 'tanstack';

export interface Variant {
  name: VariantName;
  /**
   * The tRPC packages, pinned: what a t3 app resolves (the React package pins server and client to its own
   * version); the React package first. Then any other package the variant adds, pinned.
   */
  dependencies: Record<string, string>;
  /** Dependencies of t3's package.json this variant removes. */
  removeDependencies: string[];
  /** Overlay folders under example-app/t3/, copied in order onto the generated app. */
  overlays: string[];
  /** t3's files an overlay may replace (any other overlay file must be new). */
  replaces: string[];
  /** t3's files this variant deletes. */
  deletes: string[];
  edits: Edit[];
  /** Whether the router's errorFormatter adds `data.idempotency`. */
  formatterHasReasons: boolean;
  /** Whether the client provider persists payments in flight (with their key) and resumes them after a reload. */
  persistsPayments: boolean;
}

export interface Edit {
  file: string;
  find: string;
  replace: string;
}

const TRPC_FILE = 'src/server/api/trpc.ts';
const ROOT_FILE = 'src/server/api/root.ts';
const REACT_FILE = 'src/trpc/react.tsx';

// src/server/api/trpc.ts: the idempotent procedure, after t3's publicProcedure.
const idempotentProcedure: Edit = {
  file: TRPC_FILE,
  find: 'export const publicProcedure = t.procedure.use(timingMiddleware);\n',
  replace: `export const publicProcedure = t.procedure.use(timingMiddleware);

/**
 * Idempotent procedure
 *
 * Every mutation built from it runs once per Idempotency-Key header: a retry or a double click
 * with the same key gets the stored result of the first call. memoryStore() holds the keys in
 * this process; use the Redis or PostgreSQL store when the app runs on more than one. There is
 * no sign-in here, so every caller shares the keys (scope "global"); with one, build it from
 * protectedProcedure with scope: ({ ctx }) => ctx.session.user.id.
 */
export const idempotentProcedure = withIdempotency(publicProcedure, {
  scope: "global",
  store: memoryStore(),
  transformer: superjson,
});
`,
};

const importsWithoutReasons: Edit = {
  file: TRPC_FILE,
  find: 'import superjson from "superjson";\nimport { ZodError } from "zod";\n',
  replace: `import superjson from "superjson";
import { memoryStore, withIdempotency } from "trpc-idempotency";
import { ZodError } from "zod";
`,
};

const importsWithReasons: Edit = {
  file: TRPC_FILE,
  find: importsWithoutReasons.find,
  replace: `import superjson from "superjson";
import { idempotencyErrorData, memoryStore, withIdempotency } from "trpc-idempotency";
import { ZodError } from "zod";
`,
};

// src/server/api/trpc.ts, optional: the reason of an idempotency error in `error.data`.
const formatterReasons: Edit = {
  file: TRPC_FILE,
  find: `        zodError:
          error.cause instanceof ZodError ? error.cause.flatten() : null,
`,
  replace: `        zodError:
          error.cause instanceof ZodError ? error.cause.flatten() : null,
        idempotency: idempotencyErrorData(error),
`,
};

// src/server/api/root.ts: the payment router.
const rootImport: Edit = {
  file: ROOT_FILE,
  find: 'import { postRouter } from "~/server/api/routers/post";\n',
  replace: `import { paymentRouter } from "~/server/api/routers/payment";
import { postRouter } from "~/server/api/routers/post";
`,
};
const rootRouter: Edit = {
  file: ROOT_FILE,
  find: '  post: postRouter,\n',
  replace: '  post: postRouter,\n  payment: paymentRouter,\n',
};

// src/trpc/react.tsx (@trpc/react-query): idempotencyLink, and the key headers on the terminating link.
const reactImport: Edit = {
  file: REACT_FILE,
  find: 'import SuperJSON from "superjson";\n',
  replace: `import SuperJSON from "superjson";
import { idempotencyHeaders, idempotencyLink } from "trpc-idempotency/client";
`,
};
const reactLinks: Edit = {
  file: REACT_FILE,
  find: `        httpBatchStreamLink({
          transformer: SuperJSON,
          url: getBaseUrl() + "/api/trpc",
          headers: () => {
            const headers = new Headers();
            headers.set("x-trpc-source", "nextjs-react");
            return headers;
          },
        }),
`,
  replace: `        idempotencyLink(),
        httpBatchStreamLink({
          transformer: SuperJSON,
          url: getBaseUrl() + "/api/trpc",
          headers: idempotencyHeaders({
            headers: () => {
              const headers = new Headers();
              headers.set("x-trpc-source", "nextjs-react");
              return headers;
            },
          }),
        }),
`,
};

export const VARIANTS: Variant[] = [
  {
    // create-t3-app as generated: @trpc/react-query, whose newest (11.19.0) pins @trpc/server and @trpc/client.
    // t3's own errorFormatter is left as it is.
    name: 'react-query',
    dependencies: { '@trpc/server': '11.19.0', '@trpc/client': '11.19.0', '@trpc/react-query': '11.19.0' },
    removeDependencies: [],
    overlays: ['shared', 'react-query'],
    replaces: [],
    deletes: [],
    edits: [importsWithoutReasons, idempotentProcedure, rootImport, rootRouter, reactImport, reactLinks],
    formatterHasReasons: false,
    persistsPayments: false,
  },
  {
    // The same app on tRPC's newer React integration, @trpc/tanstack-react-query (newest 11.22.1, pinning
    // server and client). Its client provider replaces t3's src/trpc/react.tsx; t3's server-side helpers
    // and home page, written for @trpc/react-query, are replaced by a plain home page.
    // The errorFormatter adds the reasons of idempotency errors. The provider persists payments in flight with
    // TanStack's persister packages: their newest (5.104.5) beside the @tanstack/react-query t3 resolves (5.108.4).
    name: 'tanstack',
    dependencies: {
      '@trpc/server': '11.22.1',
      '@trpc/client': '11.22.1',
      '@trpc/tanstack-react-query': '11.22.1',
      '@tanstack/react-query-persist-client': '5.104.5',
      '@tanstack/query-async-storage-persister': '5.104.5',
    },
    removeDependencies: ['@trpc/react-query'],
    overlays: ['shared', 'tanstack'],
    replaces: [REACT_FILE, 'src/app/page.tsx'],
    deletes: ['src/trpc/server.ts', 'src/app/_components/post.tsx'],
    edits: [importsWithReasons, formatterReasons, idempotentProcedure, rootImport, rootRouter],
    formatterHasReasons: true,
    persistsPayments: true,
  },
];

/** Replaces `find` by `replace` in `text`; `find` must occur exactly once. */
export function applyEdit(text: string, edit: Edit): string {
  const at = text.indexOf(edit.find);
  if (at === -1) {
    throw new Error(
      `${edit.file}: create-t3-app's text to replace was not found (has the template changed?):\n${edit.find}`,
    );
  }
  if (text.indexOf(edit.find, at + 1) !== -1) {
    throw new Error(`${edit.file}: create-t3-app's text to replace occurs more than once:\n${edit.find}`);
  }
  return text.slice(0, at) + edit.replace + text.slice(at + edit.find.length);
}
