#!/usr/bin/env bash
# Start a built bundle as a person's machine would, with nothing of the build machine in reach: an empty PATH (no
# compiler, no Python), throwaway user folders. The command line makes the tiny demo model and renders a line on the
# fast path, which must run the bundle's own C++ kernels; then the window opens for two seconds (fake engine).
# Prints the times a person waits: the first start of the command line, the load, the line.
#   packaging/smoke.sh dist/s2studio
set -euo pipefail
bundle=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/empty-path"
run() {  # the bundle's binary alone: a clean environment, an empty PATH
  env -i HOME="$tmp/home" PATH="$tmp/empty-path" LANG=C.UTF-8 S2STUDIO_DATA_DIR="$tmp/data" \
    XDG_CONFIG_HOME="$tmp/config" XDG_CACHE_HOME="$tmp/cache" QT_QPA_PLATFORM=offscreen "$@"
}
for compiler in c++ g++ gcc cc clang cl; do
  if PATH="$tmp/empty-path" command -v "$compiler" >/dev/null; then echo "a compiler is on the smoke test's PATH" >&2; exit 1; fi
done
t0=$(date +%s.%N)
run "$bundle/s2studio" --help >/dev/null
t1=$(date +%s.%N)
run "$bundle/s2studio" demo-model "$tmp/model" >/dev/null
t2=$(date +%s.%N)
run "$bundle/s2studio" synth --model "$tmp/model" --fast --device cpu --seed 1 --max-new-tokens 24 \
  --text "<|speaker:0|>Hello from the bundle." --out "$tmp/line.wav" 2> "$tmp/synth.log"
t3=$(date +%s.%N)
cat "$tmp/synth.log"
grep -q "C++ kernels (" "$tmp/synth.log" || { echo "the bundle did not run its C++ kernels" >&2; exit 1; }
[ -s "$tmp/line.wav" ] || { echo "no audio written" >&2; exit 1; }
run S2STUDIO_ENGINE=fake S2STUDIO_QUIT_AFTER_MS=2000 "$bundle/s2studio"
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN { printf "first start (--help): %.1f s; demo model: %.1f s; \
synth --fast, load and a line: %.1f s\n", b - a, c - b, d - c }'
echo "the bundle started with no compiler on PATH, rendered a line with its C++ kernels, and opened its window"
