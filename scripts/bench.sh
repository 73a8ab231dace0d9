#!/usr/bin/env bash
# Runs the micro-benchmarks under bench/ and prints their summary tables (the figures that
# docs/PERFORMANCE.md records). Benchmarks are not tests: nothing here fails on a slow result.
#
#   scripts/bench.sh                      # build dir ./build, Google Benchmark's default run time
#   scripts/bench.sh -b build-bench -q    # another build dir, quick (0.1 s per benchmark)
#   scripts/bench.sh -o /tmp/bench-logs   # also keep each program's full output there
#   BENCHES="dispatch_bench" scripts/bench.sh   # a subset
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
min_time=""
out_dir=""
usage() { echo "usage: $0 [-b BUILD_DIR] [-q] [-t MIN_TIME_S] [-o LOG_DIR]" >&2; exit 2; }
while getopts "b:qt:o:h" opt; do
  case "$opt" in
    b) build="$(cd "$OPTARG" && pwd)" ;;
    q) min_time=0.1 ;;
    t) min_time="$OPTARG" ;;
    o) out_dir="$OPTARG" ;;
    *) usage ;;
  esac
done

benches="${BENCHES:-stream_triad elementwise_bench matmul_bench dispatch_bench}"
for b in $benches; do
  if [[ ! -x "$build/bench/$b" ]]; then
    echo "error: $build/bench/$b not built (ninja -C $build $benches)" >&2
    exit 1
  fi
done

# The machine, as docs/PERFORMANCE.md records it.
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
isa="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512[a-z_0-9]*|amx[a-z_0-9]*|avx_vnni)$' | sort -u | tr '\n' ' ')"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "machine: $cpu, nproc $(nproc), ISA: ${isa:-none of avx2/avx512}"
echo "load average: $load (figures are unreliable when it exceeds nproc)"
echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (dirty)')"
echo

args=(--benchmark_color=false)
[[ -n "$min_time" ]] && args+=(--benchmark_min_time="$min_time")
[[ -n "$out_dir" ]] && mkdir -p "$out_dir"

summary=""
for b in $benches; do
  log="$(mktemp)"
  echo ">>> $build/bench/$b ${args[*]}"
  "$build/bench/$b" "${args[@]}" 2>&1 | tee "$log" | grep -E '^(BM_|Benchmark|-{10})' || true
  # Each program ends with "## <title>" and its table: collect those for the final report.
  summary+="$(sed -n '/^## /,$p' "$log")"$'\n\n'
  [[ -n "$out_dir" ]] && cp "$log" "$out_dir/$b.txt"
  rm -f "$log"
  echo
done

echo "================ summary ================"
printf '%s' "$summary"
