#!/usr/bin/env bash
# Check qkv's packaging end to end (docs/packaging.md):
#   1. cmake --install BUILD_DIR into a fresh prefix; the expected files are there and the
#      exported CMake targets hold no build-tree path, precompiled header or -march flag;
#   2. examples/consumer (find_package(qkv), its own layer, doctest) configures, builds and passes
#      its tests against that prefix only;
#   3. cpack -G DEB in BUILD_DIR makes qkv_<version>_<arch>.deb with its dependencies declared;
#   4. as root with apt-get/dpkg: install the .deb, run `qkv info`, a 20-step training run and
#      `qkv gradcheck --only '*softmax*'` from /usr/bin, then remove the package again.
# Not root: step 4 is skipped with a message. Exit 0 only if every step that ran passed.
#   tools/check_package.sh BUILD_DIR        (BUILD_DIR configured from this source tree)
set -uo pipefail

usage() { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
BUILD=$(cd "$1" 2>/dev/null && pwd) || { echo "check_package: no directory $1" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
[[ -f $BUILD/CMakeCache.txt ]] || { echo "check_package: $BUILD is not a CMake build directory" >&2; exit 2; }
grep -q "^qkv_SOURCE_DIR:STATIC=$SRC\$" "$BUILD/CMakeCache.txt" ||
  { echo "check_package: $BUILD was not configured from $SRC" >&2; exit 2; }
JOBS=${JOBS:-2}
LIBDIR=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
LIBDIR=${LIBDIR:-lib}

TMP=$(mktemp -d /tmp/qkv-check-package.XXXXXX)
PASSED=() FAILED=() SKIPPED=()
INSTALLED_BY_US=0
EXTRA_PKGS=()
LOG=$TMP/step.log

ok()   { PASSED+=("$1"); echo "  ok    $1"; }
bad()  { FAILED+=("$1"); echo "  FAIL  $1"; }
skip() { SKIPPED+=("$1"); echo "  skip  $1"; }
# run NAME CMD...: run CMD with its output in $LOG, shown only when it fails.
run() {
  local name=$1; shift
  if "$@" >"$LOG" 2>&1; then ok "$name"; return 0; fi
  bad "$name"; sed 's/^/        /' "$LOG" | tail -40; return 1
}
remove_package() {
  if [[ $INSTALLED_BY_US == 1 ]]; then
    INSTALLED_BY_US=0
    if run "remove the package (apt-get remove qkv${EXTRA_PKGS[*]:+ ${EXTRA_PKGS[*]}})" \
        apt-get -o DPkg::Lock::Timeout=600 remove -y qkv "${EXTRA_PKGS[@]}"; then
      if [[ -e /usr/bin/qkv || -e /usr/share/qkv ]]; then bad "nothing of qkv left in /usr"; else ok "nothing of qkv left in /usr"; fi
    fi
  fi
}
cleanup() { remove_package; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

echo "== qkv packaging check: build $BUILD, source $SRC, scratch $TMP"
echo "-- 1. cmake --install into a fresh prefix"
PREFIX=$TMP/prefix
run "build is up to date (cmake --build --target qkv qkv_cli)" cmake --build "$BUILD" -j"$JOBS" --target qkv qkv_cli
run "cmake --install $BUILD --prefix $PREFIX" cmake --install "$BUILD" --prefix "$PREFIX"
missing=()
for f in bin/qkv $LIBDIR/libqkv.a include/qkv/qkv.hpp include/qkv/version.hpp include/qkv/ops/attention.hpp \
         include/qkv/autograd/gradcheck.hpp $LIBDIR/cmake/qkv/qkvConfig.cmake $LIBDIR/cmake/qkv/qkvConfigVersion.cmake \
         $LIBDIR/cmake/qkv/qkvTargets.cmake share/qkv/configs/sort.yaml share/qkv/scripts/plot_prune.py \
         share/doc/qkv/README.md share/doc/qkv/packaging.md; do
  [[ -e $PREFIX/$f ]] || missing+=("$f")
done
if [[ ${#missing[@]} -eq 0 ]]; then ok "installed files present (bin/qkv, libqkv.a, headers + version.hpp, configs, scripts, docs, CMake package)"
else bad "installed files present: missing ${missing[*]}"; fi
if [[ -e $PREFIX/$LIBDIR/libqkv_app.a || -e $PREFIX/include/qkv/version.hpp.in ]]; then bad "no qkv_app or version.hpp.in installed"
else ok "no qkv_app or version.hpp.in installed"; fi
targets=$(cat "$PREFIX"/$LIBDIR/cmake/qkv/qkvTargets*.cmake 2>/dev/null)
leaks=()
grep -qF "$SRC" <<<"$targets" && leaks+=("source-tree path")
grep -qF "$BUILD" <<<"$targets" && leaks+=("build-tree path")
grep -q "PRECOMPILE_HEADERS" <<<"$targets" && leaks+=("precompiled headers")
grep -q -- "-march\|-Wall" <<<"$targets" && leaks+=("qkv's own compile flags")
if [[ -n $targets && ${#leaks[@]} -eq 0 ]]; then ok "exported targets: no build paths, PCH or compile flags"
else bad "exported targets leak: ${leaks[*]:-no targets file}"; fi
if grep -q " T qkv::gradcheck(" <<<"$(nm -C "$PREFIX/$LIBDIR/libqkv.a" 2>/dev/null)"; then ok "libqkv.a has its symbols (qkv::gradcheck)"
else bad "libqkv.a has its symbols (qkv::gradcheck)"; fi

echo "-- 2. examples/consumer against the installed prefix only"
CONSUMER=$TMP/consumer
if run "configure examples/consumer (CMAKE_PREFIX_PATH=$PREFIX)" \
     cmake -S "$SRC/examples/consumer" -B "$CONSUMER" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON; then
  if grep -q "^qkv_DIR:PATH=$PREFIX/$LIBDIR/cmake/qkv\$" "$CONSUMER/CMakeCache.txt"; then ok "found qkv in the prefix ($PREFIX/$LIBDIR/cmake/qkv)"
  else bad "found qkv in the prefix: $(grep '^qkv_DIR' "$CONSUMER/CMakeCache.txt")"; fi
  if run "build examples/consumer" cmake --build "$CONSUMER" -j"$JOBS"; then
    if grep -rqF -- "$SRC/include" "$CONSUMER/compile_commands.json" "$CONSUMER"/CMakeFiles/*.dir/flags.make 2>/dev/null; then
      bad "consumer compiled against the installed headers only"
    else ok "consumer compiled against the installed headers only"; fi
    if run "consumer tests (ctest: doctest gradcheck + loss decreases, gated_train)" \
         ctest --test-dir "$CONSUMER" --output-on-failure; then
      "$CONSUMER/gated_attention_test" 2>&1 | grep -E "^\[doctest\] (test cases|assertions)" | sed 's/^/        /'
      "$CONSUMER/gated_train" 60 2>&1 | tail -1 | sed 's/^/        /'
    fi
  fi
fi

echo "-- 3. cpack -G DEB"
rm -f "$BUILD"/qkv_*.deb
DEB=
if run "cpack -G DEB in $BUILD" bash -c "cd '$BUILD' && cpack -G DEB"; then
  DEB=$(ls "$BUILD"/qkv_*.deb 2>/dev/null | head -1)
  if [[ -n $DEB ]]; then
    ok "made $(basename "$DEB") ($(du -h "$DEB" | cut -f1))"
    dpkg-deb -f "$DEB" Package Version Architecture Depends Recommends Suggests | sed 's/^/        /'
    contents=$(dpkg-deb -c "$DEB")
    missing=()
    for f in ./usr/bin/qkv ./usr/$LIBDIR/libqkv.a ./usr/include/qkv/version.hpp ./usr/$LIBDIR/cmake/qkv/qkvConfig.cmake \
             ./usr/share/qkv/configs/sort.yaml ./usr/share/qkv/scripts/plot_prune.py ./usr/share/doc/qkv/README.md; do
      grep -q " $f\$" <<<"$contents" || missing+=("$f")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then ok "package contents (/usr/bin/qkv, lib, headers, CMake package, configs, scripts, docs)"
    else bad "package contents: missing ${missing[*]}"; fi
    deps=$(dpkg-deb -f "$DEB" Depends)
    need=(libhdf5-103-1 libyaml-cpp0.7 libopenblas0)
    grep -q "NEEDED.*libgomp" <(readelf -d "$BUILD/qkv" 2>/dev/null) && need+=(libgomp1)
    grep -q "NEEDED.*libmpi" <(readelf -d "$BUILD/qkv" 2>/dev/null) && need+=(libopenmpi3)
    absent=(); for p in "${need[@]}"; do grep -q "$p" <<<"$deps" || absent+=("$p"); done
    if [[ ${#absent[@]} -eq 0 ]]; then ok "Depends names ${need[*]}"; else bad "Depends lacks ${absent[*]}"; fi
  else
    bad "cpack made no qkv_*.deb"
  fi
fi

echo "-- 4. install the package, run it, remove it"
if [[ -z $DEB ]]; then
  skip "install: no package was made"
elif [[ $(id -u) -ne 0 ]]; then
  skip "install: not root (run as root to install $(basename "$DEB") with apt-get, run /usr/bin/qkv and remove it)"
elif ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  skip "install: no apt-get/dpkg on this machine"
elif dpkg -s qkv >/dev/null 2>&1; then
  skip "install: a qkv package is already installed ($(dpkg-query -W -f='${Version}' qkv)); left alone"
elif [[ -e /usr/bin/qkv || -e /usr/share/qkv || -e /usr/include/qkv || -e /usr/$LIBDIR/cmake/qkv ]]; then
  skip "install: qkv files not owned by a package exist under /usr; not overwriting them"
else
  # What else apt would install (missing dependencies): removed again at the end.
  mapfile -t EXTRA_PKGS < <(apt-get -s --no-install-recommends install "$DEB" 2>/dev/null | awk '/^Inst /{print $2}' | grep -vx qkv)
  [[ ${#EXTRA_PKGS[@]} -gt 0 ]] && echo "        apt also installs: ${EXTRA_PKGS[*]}"
  if run "apt-get install ./$(basename "$DEB")" \
       apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "$DEB"; then
    INSTALLED_BY_US=1
    if [[ $(dpkg -S /usr/bin/qkv 2>/dev/null) == "qkv: /usr/bin/qkv" ]]; then ok "/usr/bin/qkv belongs to package qkv"; else bad "/usr/bin/qkv belongs to package qkv"; fi
    # The path is compiled in (QKV_SCRIPT_DIRS, after the source tree's scripts/): check the
    # definition the build used, and that the installed script runs.
    if grep -rqs -- "QKV_SCRIPT_DIRS=.*:/usr/share/qkv/scripts" "$BUILD/CMakeFiles/qkv_app.dir" "$BUILD/build.ninja"; then
      ok "qkv was built to look for its scripts in /usr/share/qkv/scripts"
    else bad "qkv was built to look for its scripts in /usr/share/qkv/scripts"; fi
    if run "qkv info" /usr/bin/qkv info; then sed 's/^/        /' "$LOG" | head -6; fi
    if run "qkv train /usr/share/qkv/configs/sort.yaml (20 steps)" \
         /usr/bin/qkv train /usr/share/qkv/configs/sort.yaml --set train.steps=20 --set schedule.warmup_steps=5 \
         --out "$TMP/run" --quiet; then
      if [[ -s $TMP/run/last.h5 && -s $TMP/run/metrics.csv ]]; then ok "the run wrote last.h5 and metrics.csv"
      else bad "the run wrote last.h5 and metrics.csv ($(ls "$TMP/run" 2>/dev/null | tr '\n' ' '))"; fi
    fi
    # The installed plotting script, run as qkv runs it (/usr/bin/python3; matplotlib is a
    # Recommends), on the pruning curve of the checkpoint just trained.
    if [[ -s $TMP/run/last.h5 ]] &&
       run "qkv ablate last.h5 --prune --csv" /usr/bin/qkv ablate "$TMP/run/last.h5" --prune --csv "$TMP/prune.csv"; then
      if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
        skip "installed plot_prune.py: no matplotlib for /usr/bin/python3 (apt-get install python3-matplotlib)"
      elif run "/usr/share/qkv/scripts/plot_prune.py draws the curve" /usr/bin/python3 /usr/share/qkv/scripts/plot_prune.py \
             "$TMP/prune.csv" "$TMP/prune.png" "$TMP/run/last.h5"; then
        if [[ -s $TMP/prune.png ]]; then ok "prune.png written"; else bad "prune.png written"; fi
      fi
    fi
    # The packaged CMake package, found in /usr without any prefix path (one consumer target).
    if run "examples/consumer finds qkv in /usr and builds gated_train" bash -c \
         "cmake -S '$SRC/examples/consumer' -B '$TMP/consumer-usr' -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON &&
          grep -q '^qkv_DIR:PATH=/usr/$LIBDIR/cmake/qkv\$' '$TMP/consumer-usr/CMakeCache.txt' &&
          cmake --build '$TMP/consumer-usr' -j$JOBS --target gated_train"; then
      run "gated_train 40 (linked with /usr/$LIBDIR/libqkv.a)" "$TMP/consumer-usr/gated_train" 40 && tail -1 "$LOG" | sed 's/^/        /'
    fi
    if grep -q softmax <<<"$(/usr/bin/qkv gradcheck --list 2>/dev/null)"; then ok "qkv gradcheck --list has softmax checks"
    else bad "qkv gradcheck --list has softmax checks"; fi
    if run "qkv gradcheck --only '*softmax*'" /usr/bin/qkv gradcheck --only '*softmax*'; then
      tail -1 "$LOG" | sed 's/^/        /'
    fi
  fi
  remove_package
fi

echo "== ${#PASSED[@]} passed, ${#FAILED[@]} failed, ${#SKIPPED[@]} skipped"
for s in "${SKIPPED[@]}"; do echo "   skipped: $s"; done
for f in "${FAILED[@]}"; do echo "   FAILED:  $f"; done
[[ ${#FAILED[@]} -eq 0 ]]
