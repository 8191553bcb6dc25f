#!/usr/bin/env bash
# npm test: the five suites, unit, live, e2e, faults and stacks (with the CLI's tests), stopping at the first that fails.
# unit (no service) runs first, then live (the library on real Redis, PostgreSQL and MariaDB) alone: its timeouts are
# the tightest. The stacks suite waits mostly on npm and next, so it runs beside e2e and faults; its output
# is printed when they have ended.
# It installs the package packed once here, or the tarball TRPC_IDEMPOTENCY_TGZ names (.ci/run's
# package check), so that no build of this checkout runs while the example app reads dist/.
# Fails if any suite fails.
set -uo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
stacks=
trap '[ -n "$stacks" ] && kill -- -"$stacks" 2>/dev/null; rm -rf "$work"' EXIT

if [ -z "${TRPC_IDEMPOTENCY_TGZ:-}" ]; then
  npm run build --silent || exit 1
  TRPC_IDEMPOTENCY_TGZ="$work/$(npm pack --silent --pack-destination "$work" | tail -1)" || exit 1
  export TRPC_IDEMPOTENCY_TGZ
fi
failed=
suite() { npm run "$1" || { failed="$1"; return 1; }; }
if suite test:unit && suite test:live; then
  # in a process group of its own (setsid), so that an interrupted run ends it and its npm and next too
  setsid npm run test:stacks >"$work/stacks.log" 2>&1 &
  stacks=$!
  suite test:e2e && suite test:faults
fi

if [ -n "$stacks" ]; then
  echo
  echo "== npm run test:stacks (ran beside test:e2e and test:faults)"
  wait "$stacks" || failed="${failed:+$failed and }test:stacks"
  stacks=
  cat "$work/stacks.log"
fi
if [ -n "$failed" ]; then
  echo "npm test: $failed failed" >&2
  exit 1
fi
