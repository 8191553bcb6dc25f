#!/usr/bin/env bash
# Instructions per call of the in-process callers (bench/profile-inprocess.ts), counted by callgrind:
# deterministic within a few percent (GC timing varies), unlike timings on a shared machine. Two runs
# differing only in their number of calls; the difference over the extra calls is the cost of one call.
# It runs a copy of the built dist/ (`npm run build` first; or DIST=another build), so a build meanwhile
# does not change it.
#   bash bench/callgrind-inprocess.sh [base|first|replay|minimal|redis-first|node-redis-replay ...]    (LOW, HIGH, WARMUP: call counts)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mkdir "$out/bench"
cp -r "${DIST:-dist}" "$out/dist"
ln -s "$PWD/node_modules" "$out/node_modules"
# Plain JavaScript, so that no loader thread runs under valgrind.
node_modules/.bin/esbuild bench/profile-inprocess.ts --bundle --platform=node --format=esm \
  --external:../dist/* --external:@trpc/server --external:ioredis --external:redis --outfile="$out/bench/profile.mjs" --log-level=warning
low=${LOW:-2000}
high=${HIGH:-12000}
# --single-threaded: no concurrent compiler or GC threads, whose work would vary from run to run.
count() {
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" node --single-threaded \
    "$out/bench/profile.mjs" "$1" "$2" "${WARMUP:-12000}" >/dev/null 2>"$out/log"
  grep -E '^summary:|^totals:' "$out/cg.out" | head -1 | awk '{print $2}'
}
for m in ${*:-base first replay}; do
  a=$(count "$m" "$low")
  b=$(count "$m" "$high")
  echo "$m: $(((b - a) / (high - low))) instructions per call ($a at $low calls, $b at $high)"
done
