#!/usr/bin/env bash
# Run the libFuzzer targets for a bounded time (docs/reliability.md).
#
#   tools/fuzz.sh [SECONDS] [TARGET...]     default: 60 seconds each, targets: config checkpoint
#
# Builds build-fuzz/ with clang (library and targets instrumented: libFuzzer + ASan + UBSan,
# OpenMP and MPI off), seeds the corpora (tests/fuzz/corpus/<target> plus checkpoints written by
# fuzz_seeds), and fuzzes each target. The working corpus lives in build-fuzz/corpus/<target>;
# crash inputs land in build-fuzz/artifacts/<target>/. To keep a crash as a regression: fix the
# bug, copy the input to tests/fuzz/regressions/<target>/ (a descriptive file name), and the
# doctest "fuzz regressions" in tests/reliability/ replays it on every test run.
# Environment: BUILD (default build-fuzz), JOBS (default 2), CXX/CC (default clang++/clang),
# FUZZ_ARGS: more libFuzzer options, e.g. FUZZ_ARGS="-fork=1 -ignore_crashes=1" to keep going
# after a crash and collect every crash input of the run (known HDF5-internal crashes: see
# docs/reliability.md, Known limits).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(config checkpoint)
BUILD=${BUILD:-build-fuzz}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DQKV_FUZZ=ON -DQKV_OPENMP=OFF -DQKV_MPI=OFF \
  -DQKV_BUILD_TESTS=OFF -DQKV_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target fuzz_seeds $(printf 'fuzz_%s ' "${TARGETS[@]}")

status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  artifacts="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  cp -n tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null || true
  cp -n tests/fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
  [ "$t" = checkpoint ] && "$BUILD/tests/fuzz/fuzz_seeds" "$corpus"
  extra=()
  [ -f "tests/fuzz/$t.dict" ] && extra+=(-dict="tests/fuzz/$t.dict")
  # shellcheck disable=SC2206
  extra+=(${FUZZ_ARGS:-})
  echo "== fuzz_$t for ${SECONDS_EACH}s (corpus $corpus)"
  # Leak detection is off: HDF5 keeps global state that LeakSanitizer reports at exit.
  if ! ASAN_OPTIONS=detect_leaks=0 TMPDIR="${TMPDIR:-/tmp}" "$BUILD/tests/fuzz/fuzz_$t" \
      -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 "${extra[@]}" "$corpus" \
      > "$BUILD/fuzz_$t.log" 2>&1; then
    echo "fuzz_$t FOUND A FAILURE: see $BUILD/fuzz_$t.log and $artifacts/"
    tail -40 "$BUILD/fuzz_$t.log"
    status=1
  else
    grep -E '^stat::(number_of_executed_units|peak_rss_mb)|cov:' "$BUILD/fuzz_$t.log" | tail -3
  fi
done
exit $status
