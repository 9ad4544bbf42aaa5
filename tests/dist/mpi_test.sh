#!/usr/bin/env bash
# Real multi-process jobs on this machine (mpirun --oversubscribe -np 2, loopback only), checking
# the files they leave. Run by CTest (tests/mpi.cmake):
#   mpi_test.sh TEST QKV_BINARY WORK_DIR
# TEST: equivalence | masked | resume | checksum | kill | sweep | nompi. Exit 77 = skipped (no mpirun).
set -u
test_name=$1 qkv=$2 work=$3
mpirun=$(command -v mpirun) || { echo "mpirun not found: skipped"; exit 77; }
command -v h5diff >/dev/null || { echo "h5diff (hdf5-tools) not found: skipped"; exit 77; }
# CI runs as root; OpenMPI refuses that unless told. Loopback only, no binding (2 ranks on 2 cores).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
mpi() { timeout 120 "$mpirun" --oversubscribe -np "$@"; }

rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
checks=0
pass() { checks=$((checks + 1)); }  # one more check passed (counted and printed at the end)

# A tiny sort model, with dropout: each rank draws the mask entries of its own rows of the global
# batch (Generator::set_shard), so masks do not depend on the split.
cat >tiny.yaml <<'EOF'
seed: 3
model: {arch: encoder, d_model: 32, heads: 2, layers: 1, d_ff: 64, dropout: 0.1, attn_dropout: 0.1}
task: {name: sort, vocab: 8, length: 8, eval_size: 64}
optimizer: {name: adamw, lr: 0.003, clip_grad_norm: 1.0}
schedule: {name: constant, warmup_steps: 0}
train: {steps: 8, batch_size: 16, eval_every: 2, checkpoint_every: 4, log_every: 2, diagnostics: false}
run: {out: unused}
EOF

# Column $3 of metrics files $1 and $2 agree to relative tolerance $4 on every row.
same_column() {
  awk -F, -v col="$3" -v tol="$4" '
    FNR == 1 { for (i = 1; i <= NF; ++i) if ($i == col) c = i; next }
    NR == FNR { a[FNR] = $c; n = FNR; next }
    { b = $c; d = a[FNR] - b; if (d < 0) d = -d; m = (b < 0 ? -b : b);
      if (d > tol * m + 1e-30) { printf "%s row %d: %s vs %s\n", col, FNR, a[FNR], b; bad = 1 }
      if (d / (m + 1e-30) > worst) worst = d / (m + 1e-30); rows++ }
    END { if (rows != n - 1 || rows == 0) { print col ": row counts differ or empty"; exit 1 }
          printf "%-10s max relative difference %.3g over %d rows\n", col, worst, rows; exit bad }' "$1" "$2"
}
# Parameters to 1e-5 (absolute; they are of order 0.1 to 1). Not the key bias: its gradient is
# exactly 0 in exact arithmetic (softmax ignores a shift of all scores), so what it gets is
# rounding noise, which Adam scales up to steps of size lr whatever the split.
close_params() {
  h5diff -d 1e-5 --exclude-path /model/blocks.0.attn.w_k.bias --exclude-path /optimizer --exclude-path /config \
    --exclude-path /rng --exclude-path /train --exclude-path /metrics "$1" "$2" >diff.txt || { head -20 diff.txt; return 1; }
}
# Two checkpoints hold bitwise-identical parameters and optimizer state.
bitwise_same() { h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optimizer /optimizer; }
train() { "$qkv" train tiny.yaml --quiet --threads 1 "$@"; }

case $test_name in
masked)
  # A masked grammar encoder (pad keys masked, masks drawn per example): 1 rank with batch 16 vs
  # 2 ranks with 8 each follow the same trajectory, and 2 ranks give the same bits at 1 and 2
  # threads per rank.
  cat >masked.yaml <<'EOM'
seed: 5
model: {arch: encoder, d_model: 32, heads: 2, layers: 1, d_ff: 64, dropout: 0.1}
task: {name: grammar, language: zh, objective: masked, length: 32, eval_size: 32}
optimizer: {name: adamw, lr: 0.003, clip_grad_norm: 1.0}
schedule: {name: constant, warmup_steps: 0}
train: {steps: 6, batch_size: 16, eval_every: 2, checkpoint_every: 6, log_every: 2, diagnostics: false}
run: {out: unused}
EOM
  "$qkv" train masked.yaml --quiet --threads 1 --out one && pass || fail "1-rank masked run"
  mpi 2 "$qkv" train masked.yaml --quiet --threads 1 --out two && pass || fail "2-rank masked run"
  for col in train_loss eval_loss grad_norm; do same_column one/metrics.csv two/metrics.csv $col 1e-5 && pass || fail "$col"; done
  mpi 2 "$qkv" train masked.yaml --quiet --threads 2 --out two_t2 && pass || fail "2-rank, 2-thread masked run"
  bitwise_same two/last.h5 two_t2/last.h5 && pass || fail "masked: 2 ranks x 1 thread vs 2 ranks x 2 threads not bitwise equal"
  ;;
equivalence)
  # 1 rank with batch 16 vs 2 ranks with 8 each: same trajectory to 1e-5 relative.
  train --out one && pass || fail "1-rank run"
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out two && pass || fail "2-rank run"
  for col in train_loss eval_loss grad_norm; do same_column one/metrics.csv two/metrics.csv $col 1e-5 && pass || fail "$col"; done
  close_params one/last.h5 two/last.h5 && pass || fail "parameters differ by > 1e-5"
  echo "parameters agree to 1e-5 (absolute)"
  # Same rank count: bitwise, whatever the threads per rank.
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 2 --out two_t2 && pass || fail "2-rank, 2-thread run"
  bitwise_same two/last.h5 two_t2/last.h5 && pass || fail "2 ranks x 1 thread vs 2 ranks x 2 threads not bitwise equal"
  cmp <(cut -d, -f1-8 two/metrics.csv) <(cut -d, -f1-8 two_t2/metrics.csv) && pass || fail "metrics differ between thread counts"
  echo "2 ranks: bitwise identical for 1 and 2 threads per rank"
  # The decoder language model on text (a generated corpus), with dropout: the same.
  for i in $(seq 1 200); do echo "我爱吃苹果。the cat chases the mouse $((i % 10))."; done >corpus.txt
  cat >lm.yaml <<'EOF'
seed: 3
model: {arch: decoder, d_model: 32, heads: 2, layers: 2, d_ff: 64, positional: rope, dropout: 0.1}
task: {name: text, path: corpus.txt, length: 16, eval_size: 16}
optimizer: {name: adamw, lr: 0.003, clip_grad_norm: 1.0}
schedule: {name: constant, warmup_steps: 0}
train: {steps: 8, batch_size: 16, eval_every: 2, checkpoint_every: 4, log_every: 2, diagnostics: false}
run: {out: unused}
EOF
  "$qkv" train lm.yaml --quiet --threads 1 --out lm_one && pass || fail "1-rank language-model run"
  mpi 2 "$qkv" train lm.yaml --quiet --threads 1 --out lm_two && pass || fail "2-rank language-model run"
  for col in train_loss eval_loss grad_norm; do same_column lm_one/metrics.csv lm_two/metrics.csv $col 1e-5 && pass || fail "language model: $col"; done
  echo "decoder on text: 1 rank and 2 ranks follow the same trajectory"
  ;;
resume)
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out full && pass || fail "uninterrupted run"
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out part --stop-after 4 && pass || fail "first half"
  [ -f part/last.h5 ] && pass || fail "no last.h5 after --stop-after"
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out part --resume part/last.h5 && pass || fail "resumed run"
  bitwise_same full/last.h5 part/last.h5 && pass || fail "resumed 2-rank run differs from the uninterrupted one"
  cmp <(cut -d, -f1-8 full/metrics.csv) <(cut -d, -f1-8 part/metrics.csv) && pass || fail "metrics differ after resume"
  echo "2-rank resume: bitwise identical to the uninterrupted run"
  # Any rank count can resume: 1 process continues the 2-rank checkpoint.
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out cross --stop-after 4 && pass || fail "2-rank first half"
  train --out cross --resume cross/last.h5 && pass || fail "1-rank continuation"
  close_params full/last.h5 cross/last.h5 && pass || fail "1-rank continuation of a 2-rank run drifted"
  same_column full/metrics.csv cross/metrics.csv eval_loss 1e-5 && pass || fail "eval_loss"
  ;;
checksum)
  QKV_DEBUG_PERTURB_RANK=1 mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out bad 2>err.txt
  rc=$?
  cat err.txt
  [ $rc -ne 0 ] && pass || fail "a run whose ranks differ exited 0"
  grep -q "rank 1's parameters differ from rank 0's" err.txt && pass || fail "no clear message"
  [ ! -f bad/best.h5 ] && [ ! -f bad/last.h5 ] && pass || fail "a checkpoint was written from diverged ranks"
  ;;
kill)
  # Rank 1 dies (SIGKILL) mid-run: the job ends non-zero within a bounded time; last.h5 loads.
  # Its wall-clock bound is generous for a loaded machine; OpenMPI takes well under a second.
  QKV_TEST_TAG=$$ "$mpirun" --oversubscribe -np 2 "$qkv" train tiny.yaml --quiet --threads 1 --out run \
    --set train.steps=1000000 --set train.checkpoint_every=2 --set train.eval_every=1000 2>err.txt &
  job=$!
  for _ in $(seq 600); do [ -f run/last.h5 ] && break; sleep 0.05; done
  [ -f run/last.h5 ] && pass || { kill -9 $job; fail "no checkpoint after 30 s"; }
  victim=
  for p in /proc/[0-9]*; do
    env=$(tr '\0' '\n' 2>/dev/null <$p/environ) || continue
    grep -qx "QKV_TEST_TAG=$$" <<<"$env" && grep -qx OMPI_COMM_WORLD_RANK=1 <<<"$env" && victim=${p#/proc/}
  done
  [ -n "$victim" ] && pass || { kill -9 $job; fail "rank 1 not found among mpirun's children"; }
  t0=$(date +%s.%N)
  kill -9 "$victim"
  bound=20
  for _ in $(seq $((bound * 20))); do kill -0 $job 2>/dev/null || break; sleep 0.05; done
  if kill -0 $job 2>/dev/null; then kill -9 $job; fail "job still running $bound s after rank 1 died"; fi
  wait $job
  rc=$?
  t1=$(date +%s.%N)
  cat err.txt
  echo "job exited with status $rc, $(awk "BEGIN { print $t1 - $t0 }") s after the kill"
  [ $rc -ne 0 ] && pass || fail "exit status 0 after a rank died"
  "$qkv" eval run/last.h5 --threads 1 && pass || fail "last.h5 does not load"
  ;;
sweep)
  cat >sweep.yaml <<'EOF'
base: tiny.yaml
set: {train.steps: 6}
grid: {optimizer.lr: [0.003, 0.01]}
seeds: [1, 2]
EOF
  # Columns that must agree: all but the timings.
  # (run,lr,seed,status,steps,final_loss,...,steps_to_target | wall_s,tokens_per_s | train_token_acc,...)
  table() { cut -d, -f1-11,14- "$1"; }
  "$qkv" sweep sweep.yaml --out one --threads 1 && pass || fail "1-process sweep"
  mpi 2 "$qkv" sweep sweep.yaml --out two --threads 1 && pass || fail "2-rank sweep"
  cmp <(table one/results.csv) <(table two/results.csv) && pass || { cat one/results.csv two/results.csv; fail "tables differ"; }
  [ "$(grep -c ',steps,6,' two/results.csv)" = 4 ] && pass || fail "not 4 finished runs"
  # Interrupted sweep: one run was killed after its step-4 checkpoint, another just before writing
  # result.csv. The rerun finishes those two (resuming) and leaves the others alone.
  set -- $(ls two/runs)
  cp two/runs/$1/checkpoints/step_0000004.h5 two/runs/$1/last.h5
  rm two/runs/$1/result.csv two/runs/$2/result.csv
  for r in two/runs/*; do stat -c %y $r/last.h5 >$r/stamp; done
  mpi 2 "$qkv" sweep sweep.yaml --out two --threads 1 && pass || fail "resumed sweep"
  for r in two/runs/*; do
    rerun=$(cmp -s <(stat -c %y $r/last.h5) $r/stamp && echo no || echo yes)
    case $(basename $r) in
      $1 | $2) [ $rerun = yes ] && pass || fail "$(basename $r) was not rerun" ;;
      *) [ $rerun = no ] && pass || fail "finished run $(basename $r) was rerun" ;;
    esac
  done
  cmp <(table one/results.csv) <(table two/results.csv) && pass || fail "table differs after the resumed sweep"
  echo "2-rank sweep: same table as 1 process; a resumed sweep reran only the unfinished runs"
  ;;
nompi)
  # A build without MPI refuses to run as one of several processes.
  mpi 2 "$qkv" train tiny.yaml --quiet --threads 1 --out x 2>err.txt && fail "exit status 0"
  grep -q "built without MPI" err.txt && pass || { cat err.txt; fail "no clear message"; }
  ;;
*) fail "unknown test $test_name" ;;
esac
# Every case must have checked something: a case that ran no check is a failure, not a pass.
[ "$checks" -gt 0 ] || fail "$test_name ran no checks"
echo "PASS: $test_name ($checks checks)"
