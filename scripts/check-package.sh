#!/usr/bin/env bash
# npm run package:check: packs the package as npm publish would, then checks the tarball:
# its types resolve under node10, node16 (CommonJS and ESM) and bundler (@arethetypeswrong/cli),
# its package.json is consistent (publint), and `npm publish --dry-run` accepts it.
set -euo pipefail
cd "$(dirname "$0")/.."
# PACK_DIR: the tarball is left there (.ci/run hands it on to the stacks suite); otherwise removed
if [ -n "${PACK_DIR:-}" ]; then
  out="$PACK_DIR"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
test -f dist/index.js -a -f dist/cjs/index.js || { echo "dist/ is missing: run npm run build first" >&2; exit 2; }
tgz="$out/$(npm pack --silent --pack-destination "$out" | tail -1)"
npx --no-install attw "$tgz"
npx --no-install publint "$tgz" --strict
npm publish --dry-run --silent >/dev/null
echo "package check passed: $(basename "$tgz")"
