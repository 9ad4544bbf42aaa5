#!/usr/bin/env bash
# The experiments of the current report (experiments/README.md and its folders): sweeps, test-split
# scoring, tables and figures, each experiment alone or all of them.
#
#   tools/experiments/run.sh [--quick] [--jobs N] [--qkv PATH] [--report-only] [NAME...]
#
# NAME: induction, induction_ablation, dk_width, scale, scale_exact, heads, dropout, cross_self, mqar_sizes, retrieval, grokking, roles, lm_heads,
#   lm_dk, scale_dv, lm_heads_zh, lm_dk_zh, roles_v2, scale_init (default: all of them).
#   tools/experiments/run.sh --status [NAME...]   what is done and what is left, with an estimate
# --analysis-qkv PATH: the qkv binary the analyses run (roles_v2: its head scores; default build/qkv),
#   where training runs --qkv (an experiment's frozen binary: one code version for every run).
# Full: the committed results, experiments/NAME/ (runs.csv and the other per-run CSVs, results.md
#   with the tables, the PNGs); sweeps in runs/exp/NAME. The ones without a pilot: about 12 hours
#   on 2 cores, an estimate from the timed runs (minutes: induction 20, dk_width 20, scale 100, heads
#   35, dropout 25, cross_self 15, mqar_sizes about 300 for its full grid and 100 for seeds 4-10 of
#   every setting (190 minutes of runs two at a time on the AVX-512 EPYC), retrieval 5, grokking 120:
#   twenty runs of 6-15 minutes each on the AVX-512 EPYC, one thread each, 4.0 hours of runs two at a
#   time). roles, scale_exact, scale_dv and the lm_* ones: each README's "Budget" (0.5-4 CPU hours
#   each).
# --quick: 2 seeds, one learning rate, a few settings and 100-300 steps per run, into
#   runs/exp-quick/NAME (report included); nothing committed is touched. A smoke test of the
#   pipeline, not evidence: 6 min 13 s for the first eight on 2 cores shared with one other training
#   run (2026-12-02, AVX2 EPYC); grokking adds about 1 min (63 s, 2026-12-03, AVX-512 EPYC, shared).
# --report-only: no training; score and report what the sweep directories hold. Where an experiment's
#   sweep directories are not there (a checkout holds only the committed per-run CSVs), its tables
#   are remade from the committed CSVs and the figures drawn from per-run curves are kept as they are
#   (roles and the lm_* experiments need the runs' own files: their results.md and lr.txt are kept);
#   no qkv binary is needed then.
# Every number in a table is on the test split; the validation split stops training and picks
# the learning rate (docs/experiment-method.md). Training runs under nice, one thread each.
set -euo pipefail
cd "$(dirname "$0")/../.."

quick=0 jobs=2 qkv=build/qkv analysis_qkv=build/qkv report_only=0 status=0 names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --jobs) jobs="$2"; shift ;;
    --qkv) qkv="$2"; shift ;;
    --analysis-qkv) analysis_qkv="$2"; shift ;;
    --report-only) report_only=1 ;;
    --status) status=1 ;;
    -h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 0 ;;
    induction|induction_ablation|dk_width|scale|scale_exact|heads|dropout|cross_self|mqar_sizes|retrieval|grokking|roles|lm_heads|lm_dk|scale_dv|lm_heads_zh|lm_dk_zh|roles_v2|scale_init) names+=("$1") ;;
    *) echo "run.sh: unknown option or experiment '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#names[@]} -gt 0 ] || names=(induction induction_ablation dk_width scale scale_exact heads dropout cross_self mqar_sizes retrieval grokking roles lm_heads lm_dk scale_dv lm_heads_zh lm_dk_zh roles_v2 scale_init)
if [ -x "$qkv" ]; then qkv=$(realpath "$qkv")
elif [ $report_only = 0 ]; then echo "run.sh: $qkv not found; build first (make build) or pass --qkv" >&2; exit 2; fi
[ -x "$analysis_qkv" ] && analysis_qkv=$(realpath "$analysis_qkv")
py=/usr/bin/python3
S=tools/experiments
runs=runs/exp
quick_args=()
if [ $quick = 1 ]; then runs=runs/exp-quick; quick_args=(--seeds 1,2); fi

# sweep FILE NAME [--set K=V...]: one sweep into $runs/NAME (finished runs are skipped).
sweep() {
  local file=$1 name=$2; shift 2
  [ $report_only = 1 ] && return 0
  nice -n 10 "$qkv" sweep "$file" --out "$runs/$name" --jobs "$jobs" --threads 1 "${quick_args[@]}" "$@"
}
# score OUT SWEEP... [-- OPTION...]: score.py's per-run CSV OUT of the sweeps (test split). With
# --report-only and a sweep directory missing (a checkout with the committed CSVs only), OUT is
# reported as committed.
score() {
  local out=$1 dirs=() d; shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do dirs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  if [ $report_only = 1 ]; then
    for d in "${dirs[@]}"; do
      if [ ! -f "$d/results.csv" ]; then
        [ -f "$out" ] || { echo "run.sh: neither $d nor $out is there: nothing to report" >&2; exit 2; }
        echo "run.sh: $d not here: reporting the committed $out" >&2
        return 0
      fi
    done
  fi
  $py $S/score.py "${dirs[@]}" --out "$out" "$@" --jobs "$jobs" --qkv "$qkv"
}
# Where the report goes: the experiment's own directory (full) or beside the quick sweeps.
out_dir() { if [ $quick = 1 ]; then echo "$runs/$1/report"; else echo "experiments/$1"; fi; }

induction() {
  local o; o=$(out_dir induction); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=200 --set train.eval_every=50 --grid optimizer.lr=0.001)
  sweep experiments/induction/sweep.yaml induction "${q[@]}"
  score "$o/runs.csv" $runs/induction -- --heads "$o/heads.csv"
  $py $S/induction.py $runs/induction "$o/runs.csv" "$o/heads.csv" "$o" --qkv "$qkv" > "$o/results.md"
}

# Each head alone and random sets of heads against the labelled ones
# (experiments/induction_ablation/README.md).
induction_ablation() {
  local o; o=$(out_dir induction_ablation); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=200 --set train.eval_every=50)
  sweep experiments/induction_ablation/sweep.yaml induction_ablation "${q[@]}"
  score "$o/runs.csv" $runs/induction_ablation
  [ -d $runs/induction_ablation ] || { echo "run.sh: no sweep in $runs/induction_ablation: results.md kept" >&2; return 0; }
  $py $S/induction_ablation.py $runs/induction_ablation --out "$o" --qkv "$qkv" > "$o/results.md"
}

dk_width() {
  local o; o=$(out_dir dk_width); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=100 --grid optimizer.lr=0.003)
  for h in 2 8 32; do sweep experiments/dk_width/h$h.yaml dk_width/h$h "${q[@]}"; done
  score "$o/runs.csv" $runs/dk_width/h2 $runs/dk_width/h8 $runs/dk_width/h32 -- --columns model.heads,model.value_dim
  local R=($py $S/report.py)
  local sel=(--select-lr val_token_acc:max) w=(--derive qk_width=model.heads*model.head_dim)
  local ok=(--metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' --metric 'val_token_acc:success>=0.99')
  {
    "${R[@]}" table "$o/runs.csv" --group model.heads,model.head_dim,qk_width "${w[@]}" "${sel[@]}" "${ok[@]}" \
        --metric steps_to_target:time --metric test_token_acc:median \
        --title "d_k and heads with the value width fixed (H x d_v = 64), query-key width qk_width = H x d_k: recall, test split; training stops at 99% validation token accuracy, which is not the success rule (test >= 0.99 or >= 0.95)"
    echo
    "${R[@]}" trend "$o/runs.csv" --x model.head_dim --within model.heads "${sel[@]}" "${ok[@]}" --metric test_token_acc \
        --alternative greater --stated post-hoc --title "Smaller d_k is worse (Table 3 B): d_k against success, within each head count"
    echo
    "${R[@]}" trend "$o/runs.csv" --x model.heads --within model.head_dim "${sel[@]}" "${ok[@]}" \
        --alternative greater --stated post-hoc --title "More heads are better at a fixed d_k: heads against success, within each d_k"
    echo
    "${R[@]}" trend "$o/runs.csv" "${w[@]}" --x model.heads --within qk_width --where 'qk_width=16|64' "${sel[@]}" "${ok[@]}" \
        --alternative greater --stated post-hoc --title "At a fixed query-key width (16: 2 x 8, 8 x 2; 64: 2 x 32, 8 x 8, 32 x 2), more heads are better"
    echo
    "${R[@]}" table "$o/runs.csv" --group model.heads,model.head_dim "${sel[@]}" --lr-estimate cross-fit \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --title "Free of the winner's curse: each half of the seeds at the lr chosen on the other half"
    echo
    "${R[@]}" plot-rate "$o/runs.csv" "${w[@]}" --x qk_width --series model.heads --logx "${sel[@]}" "${ok[@]}" \
        --label model.heads=2:"2 heads" --label model.heads=8:"8 heads" --label model.heads=32:"32 heads" \
        --xlabel "query-key width H x d_k (log scale)" --out "$o/solved.png" \
        --title "Recall solved against the query-key width H x d_k (value width H x d_v = 64 throughout), one series per head count, under three success rules"
  } > "$o/results.md"
}

scale() {
  local o; o=$(out_dir scale); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=100 --grid optimizer.lr=0.001)
  sweep experiments/scale/scaled.yaml scale/scaled "${q[@]}"
  sweep experiments/scale/unscaled.yaml scale/unscaled "${q[@]}"
  local low=()  # unscaled at lr 3e-5 for d_k 256 and 512, where 1e-4 was the grid's best (full variant only)
  [ $quick = 1 ] || { sweep experiments/scale/unscaled_low.yaml scale/unscaled_low; low=($runs/scale/unscaled_low); }
  local d comp=()
  for d in 16 64 256 512; do
    sweep experiments/scale/compensated_dk$d.yaml scale/compensated_dk$d "${q[@]}"
    comp+=("$runs/scale/compensated_dk$d")
  done
  score "$o/scaled.csv" $runs/scale/scaled -- --label arm=scaled --columns model.head_dim
  score "$o/unscaled.csv" $runs/scale/unscaled "${low[@]}" -- --label arm=unscaled --columns model.head_dim
  score "$o/compensated.csv" "${comp[@]}" -- --label arm=compensated --columns model.head_dim
  # q . k at (almost) initialisation: one training step of every arm, d_k and seed.
  [ $report_only = 1 ] || $py $S/scale.py init-variance --qkv "$qkv" --out "$o/init_variance.csv" $([ $quick = 1 ] && echo --seeds 1,2)
  local R=($py $S/report.py) arms=("$o/scaled.csv" "$o/unscaled.csv" "$o/compensated.csv")
  local sel=(--select-lr val_token_acc:max)
  {
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim "${sel[@]}" --metric 'test_token_acc:success>=0.99' \
        --metric steps_to_target:time --metric test_token_acc:median --compare arm=scaled \
        --title "Scaled, unscaled and unscaled with W_q, W_k init x d_k^(-1/4): recall, one head, test split; the stated family of 24 tests"
    echo
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim "${sel[@]}" --metric 'test_token_acc:success>=0.95' \
        --metric 'val_token_acc:success>=0.99' --compare arm=scaled \
        --title "The same runs under two other success rules (test >= 0.95; validation >= 0.99, the stopping rule): a robustness check of the table above, its own family"
    echo
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim "${sel[@]}" --lr-estimate cross-fit \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --title "Free of the winner's curse: each half of the seeds at the lr chosen on the other half"
    echo
    "${R[@]}" table "${arms[@]}" --group optimizer.lr,isa,blas,model.head_dim,arm \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --title "Every learning rate, no selection: each lr ran on one CPU kind and code version (isa, blas), so arms compared at one lr are not confounded with the machine"
    echo
    "${R[@]}" trend "${arms[@]}" --x model.head_dim --by arm "${sel[@]}" --metric 'test_token_acc:success>=0.99' \
        --alternative two-sided --stated post-hoc \
        --title "Success against d_k, per arm (d_k also sets d_v and the output projection: model size grows with it)"
    echo
    "${R[@]}" trend "$o/init_variance.csv" --x head_dim --where arm=unscaled --metric qk_var --alternative greater \
        --stated post-hoc --title "Var(q . k) at initialisation grows with d_k (the footnote's premise), default init"
    echo
    "${R[@]}" plot-rate "${arms[@]}" --x model.head_dim --series arm --logx \
        --label arm=scaled:"scaled (1/sqrt(d_k))" --label arm=unscaled:"unscaled" \
        --label arm=compensated:"unscaled, W_q and W_k init x d_k^(-1/4)" \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' "${sel[@]}" \
        --xlabel "d_k (log scale)" --out "$o/solved.png" \
        --title "Recall solved against d_k, per arm, under two success rules (lr chosen per arm and d_k on validation)"
    echo
    $py $S/scale.py variance "$o/init_variance.csv" "${arms[@]}" --sweeps "$runs/scale" --out "$o/variance.png" \
        --out-end "$o/variance_end.png"
  } > "$o/results.md"
}

# The exact reparameterisation control (experiments/scale_exact/README.md): scaled, exact and
# init-only at d_k 512, one lr, 10 seeds, a fixed budget; scored at the last checkpoint.
scale_exact() {
  local o; o=$(out_dir scale_exact); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=100)
  local arm
  for arm in scaled exact init; do
    sweep experiments/scale_exact/$arm.yaml scale_exact/$arm "${q[@]}"
    score "$o/$arm.csv" $runs/scale_exact/$arm -- --label arm=$arm --checkpoint last.h5
  done
  [ -d $runs/scale_exact/scaled ] || { echo "run.sh: no sweeps in $runs/scale_exact: results.md kept" >&2; return 0; }
  $py $S/scale.py exact "$o"/{scaled,exact,init}.csv --sweeps $runs/scale_exact > "$o/results.md"
}

# The 1/sqrt(d_k) scale with d_v fixed (experiments/scale_dv/README.md): scaled and unscaled, each
# with its own lr pilot per d_k, a fixed budget, scored at the last checkpoint.
scale_dv() {
  local o; o=$(out_dir scale_dv); mkdir -p "$o"
  local arm dirs R=($py $S/report.py)
  for arm in scaled unscaled; do
    mapfile -t dirs < <(pilot_then_main scale_dv/$arm 100 20 model.head_dim dk)
    chosen_lrs scale_dv/$arm model.head_dim "$o/lr_$arm.txt"
    pilot_csv scale_dv/$arm "$o/pilot_$arm.csv"
    if [ ${#dirs[@]} -gt 0 ]; then
      score "$o/$arm.csv" "${dirs[@]}" -- --label arm=$arm --columns model.head_dim --checkpoint last.h5
    elif [ -f "$o/$arm.csv" ]; then
      echo "run.sh: no sweeps of scale_dv/$arm in $runs: reporting the committed $o/$arm.csv" >&2
    else
      echo "run.sh: neither sweeps of scale_dv/$arm nor $o/$arm.csv: nothing to report" >&2; return 0
    fi
  done
  local arms=("$o/scaled.csv" "$o/unscaled.csv")
  {
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim --metric 'test_token_acc:success>=0.99' --compare arm=scaled \
        --title "T1: scaled against unscaled at each d_k, d_v = 64 fixed: recall, one head, 1000 steps, last checkpoint, test split; the stated family of 5 Fisher tests"
    echo
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim --metric 'test_token_acc:success>=0.95' \
        --metric test_token_acc:median --metric attn_qk_var:median --metric attn_entropy:median \
        --title "The same runs: solved at test >= 0.95, test token accuracy, Var(q . k) and attention entropy at the end (not tested)"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=unscaled --x model.head_dim --metric test_token_acc \
        --alternative less --stated before --title "T2: the unscaled model's test token accuracy falls as d_k grows"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=scaled --x model.head_dim --metric test_token_acc \
        --alternative two-sided --stated before --title "T3: the scaled model's test token accuracy against d_k"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=unscaled --x model.head_dim --metric attn_qk_var \
        --alternative greater --stated before --title "T4: Var(q . k) at the end of training grows with d_k, unscaled"
    echo
    "${R[@]}" plot-rate "${arms[@]}" --x model.head_dim --series arm --logx \
        --label arm=scaled:"scaled (1/sqrt(d_k))" --label arm=unscaled:"unscaled" \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --xlabel "d_k, d_v = 64 fixed (log scale)" --out "$o/solved.png" \
        --title "Recall solved against d_k with d_v fixed, per arm (lr chosen per arm and d_k on tuning seeds)"
  } > "$o/results.md"
}

# The 1/sqrt(d_k) scale with its premise met (experiments/scale_init/README.md): scale_dv/'s design
# with W_q, W_k at variance 1/C and 3000 steps; an lr pilot per arm and d_k, scored at the last step.
scale_init() {
  local o; o=$(out_dir scale_init); mkdir -p "$o"
  local arm dk sub part dirs R=($py $S/report.py)
  for arm in scaled unscaled; do
    dirs=()
    for dk in 16 64 256 1024; do
      sub=scale_init/${arm}_dk$dk
      mkdir -p "$o/${arm}_dk$dk"
      mapfile -t part < <(pilot_then_main $sub 100 20 model.head_dim dk)
      chosen_lrs $sub model.head_dim "$o/${arm}_dk$dk/lr.txt"
      pilot_csv $sub "$o/${arm}_dk$dk/pilot.csv"
      dirs+=("${part[@]}")
    done
    if [ ${#dirs[@]} -gt 0 ]; then
      score "$o/$arm.csv" "${dirs[@]}" -- --label arm=$arm --columns model.head_dim --checkpoint last.h5
    elif [ ! -f "$o/$arm.csv" ]; then
      echo "run.sh: neither sweeps of scale_init/$arm nor $o/$arm.csv: nothing to report" >&2; return 0
    fi
  done
  local arms=("$o/scaled.csv" "$o/unscaled.csv")
  {
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim --metric 'test_token_acc:success>=0.99' --compare arm=scaled \
        --title "T1: scaled against unscaled at each d_k, W_q and W_k at variance 1/C, d_v = 64: recall, one head, 3000 steps, last checkpoint, test split; the stated family of 4 Fisher tests"
    echo
    "${R[@]}" table "${arms[@]}" --group arm,model.head_dim --metric 'test_token_acc:success>=0.95' \
        --metric test_token_acc:median --metric attn_qk_var:median --metric attn_entropy:median \
        --title "The same runs: solved at test >= 0.95, test token accuracy, Var(q . k) and attention entropy at the end (not tested)"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=unscaled --x model.head_dim --metric test_token_acc \
        --alternative less --stated before --title "T2: the unscaled model's test token accuracy falls as d_k grows"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=scaled --x model.head_dim --metric test_token_acc \
        --alternative two-sided --stated before --title "T3: the scaled model's test token accuracy against d_k"
    echo
    "${R[@]}" trend "${arms[@]}" --where arm=unscaled --x model.head_dim --metric attn_qk_var \
        --alternative greater --stated before --title "T4: Var(q . k) at the end of training grows with d_k, unscaled"
    echo
    "${R[@]}" plot-rate "${arms[@]}" --x model.head_dim --series arm --logx \
        --label arm=scaled:"scaled (1/sqrt(d_k))" --label arm=unscaled:"unscaled" \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --xlabel "d_k, d_v = 64, W_q and W_k at variance 1/C (log scale)" --out "$o/solved.png" \
        --title "Recall solved against d_k with the footnote's premise met, per arm (lr chosen per arm and d_k on tuning seeds)"
  } > "$o/results.md"
}

heads() {
  local o; o=$(out_dir heads); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=100 --grid model.heads=2,4 --grid optimizer.lr=0.003)
  sweep experiments/heads/recall.yaml heads/recall "${q[@]}"
  sweep experiments/heads/fortunes.yaml heads/fortunes "${q[@]}"
  score "$o/recall.csv" $runs/heads/recall -- --prune --tolerance 0.01
  score "$o/fortunes.csv" $runs/heads/fortunes -- --prune --tolerance 0.02 --heads "$o/fortunes_heads.csv"
  local R=($py $S/report.py) sel=(--select-lr val_token_acc:max)
  {
    "${R[@]}" table "$o/recall.csv" --group model.heads "${sel[@]}" \
        --metric 'test_token_acc:success>=0.99' --metric steps_to_target:time --metric removable_fraction:median \
        --compare model.heads=4 --title "Heads at fixed width: recall, test split; the stated family of 15 tests"
    echo
    "${R[@]}" table "$o/recall.csv" --group model.heads "${sel[@]}" \
        --metric 'test_token_acc:success>=0.95' --metric 'val_token_acc:success>=0.99' --compare model.heads=4 \
        --title "The same runs under two other success rules (test >= 0.95; validation >= 0.99, the stopping rule): a robustness check, its own family"
    echo
    "${R[@]}" trend "$o/recall.csv" --x model.heads "${sel[@]}" --metric removable_fraction \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' --alternative greater \
        --stated post-hoc --title "Recall: more heads are more removable, and solve more often"
    echo
    "${R[@]}" table "$o/recall.csv" --group model.heads "${sel[@]}" --lr-estimate cross-fit \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' --metric removable_fraction:median \
        --title "Recall free of the winner's curse: each half of the seeds at the lr chosen on the other half"
    echo
    "${R[@]}" table "$o/fortunes.csv" --group model.heads --select-lr val_loss:min \
        --metric test_bits_per_char:mean --metric removable_fraction:mean --compare model.heads=4 --test welch \
        --title "Heads at fixed width: fortunes char LM, test bits per char"
    echo
    "${R[@]}" trend "$o/fortunes.csv" --x model.heads --select-lr val_loss:min --metric removable_fraction \
        --alternative greater --stated post-hoc --title "Text: more heads are more removable"
    echo
    "${R[@]}" trend "$o/fortunes.csv" --x model.heads --where 'model.heads=8|16|32' --select-lr val_loss:min \
        --metric test_bits_per_char --alternative greater --stated post-hoc \
        --title "Text: beyond 8 heads, more heads are worse (the test experiments/lm_heads states before its runs, T2, applied to these runs)"
  } > "$o/results.md"
}

dropout() {
  local o; o=$(out_dir dropout); mkdir -p "$o"
  local q=() qr=() qa=()
  [ $quick = 1 ] && q=(--set train.steps=100 --grid optimizer.lr=0.003) qr=(--grid model.dropout=0.0,0.2) \
      qa=(--grid model.attn_dropout=0.1)
  sweep experiments/dropout/residual.yaml dropout/residual "${q[@]}" "${qr[@]}"
  sweep experiments/dropout/attention.yaml dropout/attention "${q[@]}" "${qa[@]}"
  local arm ck
  for arm in residual attention; do
    for ck in best last; do
      score "$o/${arm}_$ck.csv" $runs/dropout/$arm -- --train --checkpoint $ck.h5 --label arm=$arm --label checkpoint=$ck \
          --columns model.dropout,model.attn_dropout
    done
  done
  {
    for ck in best last; do
      local words="best checkpoint by validation token accuracy"; [ $ck = last ] && words="last checkpoint, no early stopping"
      local table=($py $S/report.py table "$o/residual_$ck.csv" "$o/attention_$ck.csv"
                   --group arm,model.dropout,model.attn_dropout --select-lr val_loss:min --metric test_bits_per_char:mean)
      "${table[@]}" --metric train_bits_per_char:mean \
          --title "Dropout on a 66,000-character slice of fortunes, $words: test and train bits per char"
      echo
      "${table[@]}" --test welch --compare arm=residual,model.dropout=0.0,model.attn_dropout=0.0 \
          --title "Test bits per char against no dropout ($words)"
      echo
    done
    local last=("$o/residual_last.csv" "$o/attention_last.csv") gap=(--derive gap=test_bits_per_char-train_bits_per_char)
    $py $S/report.py trend "${last[@]}" "${gap[@]}" --where model.attn_dropout=0.0 --x model.dropout --select-lr val_loss:min \
        --metric gap --alternative less --stated post-hoc \
        --title "Residual dropout, last checkpoint: the train/test gap (test minus train bits per char) closes as p grows"
    echo
    $py $S/report.py trend "${last[@]}" "${gap[@]}" --where model.dropout=0.0 --x model.attn_dropout --select-lr val_loss:min \
        --metric gap --metric test_bits_per_char --alternative less --stated post-hoc \
        --title "Attention dropout, last checkpoint: the gap closes and test bits per char fall as p grows (p = 0 is the shared no-dropout setting)"
    echo
    $py $S/report.py table "${last[@]}" --group arm,model.dropout,model.attn_dropout --select-lr val_loss:min \
        --lr-estimate cross-fit --metric test_bits_per_char:mean \
        --title "Last checkpoint, free of the winner's curse: seeds 1 and 3 at the lr chosen on seed 2, seed 2 at the lr chosen on seeds 1 and 3"
    echo
    $py $S/dropout.py "$o" --out "$o/dropout.png"
  } > "$o/results.md"
}

cross_self() {
  local o; o=$(out_dir cross_self); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=200 --grid optimizer.lr=0.003)
  local arm csvs=() heads=()
  for arm in cross encoder decoder; do
    sweep experiments/cross_self/$arm.yaml cross_self/$arm "${q[@]}"
    score "$o/$arm.csv" $runs/cross_self/$arm -- --label arm=$arm --swap --heads "$o/${arm}_heads.csv"
    csvs+=("$o/$arm.csv") heads+=("$o/${arm}_heads.csv")
  done
  {
    $py $S/report.py table "${csvs[@]}" --group arm --select-lr val_token_acc:max \
        --metric 'test_token_acc:success>=0.99' --metric steps_to_target:time --metric test_token_acc:median \
        --compare arm=cross --title "Cross- against self-attention on the same recall content (8 pairs, 8 queries), test split; the stated family of 6 tests"
    echo
    $py $S/report.py table "${csvs[@]}" --group arm --select-lr val_token_acc:max \
        --metric 'test_token_acc:success>=0.95' --metric 'val_token_acc:success>=0.99' --compare arm=cross \
        --title "The same runs under two other success rules (test >= 0.95; validation >= 0.99, the stopping rule): a robustness check, its own family"
    echo
    $py $S/report.py table "${csvs[@]}" --group arm --select-lr val_token_acc:max --lr-estimate cross-fit \
        --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --title "Free of the winner's curse: each half of the seeds at the lr chosen on the other half"
    echo
    $py $S/cross_self.py "${csvs[@]}" --heads "${heads[@]}"
  } > "$o/results.md"
}

mqar_sizes() {
  local o; o=$(out_dir mqar_sizes); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=100 --set task.eval_size=128 --grid model.d_model=64 --grid optimizer.lr=0.003)
  local n dirs=()
  for n in 64 128 256; do
    sweep experiments/mqar_sizes/len$n.yaml mqar_sizes/len$n "${q[@]}"
    dirs+=("$runs/mqar_sizes/len$n")
  done
  # Then seeds 4-10 of every cell at its lr chosen on seeds 1-3 (the tuning seeds; results.md
  # names the choice): success rates over 10 seeds. Not in the quick pipeline.
  local cell d lr
  for cell in 64:64:0.003 64:128:0.001 128:64:0.003 128:128:0.001 256:64:0.001 256:128:0.001; do
    [ $quick = 1 ] && break
    IFS=: read -r n d lr <<< "$cell"
    sweep experiments/mqar_sizes/len$n.yaml mqar_sizes/len${n}_w${d}_seeds --grid model.d_model=$d \
        --grid optimizer.lr=$lr --seeds 4,5,6,7,8,9,10
    dirs+=("$runs/mqar_sizes/len${n}_w${d}_seeds")
  done
  score "$o/runs.csv" "${dirs[@]}" -- --columns task.length,task.pairs
  local table=($py $S/report.py table "$o/runs.csv" --group task.length,task.pairs,model.d_model --select-lr val_token_acc:max)
  {
    "${table[@]}" --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --metric 'val_token_acc:success>=0.99' --metric steps_to_target:time --metric test_token_acc:median \
        --title "MQAR at Zoology's sizes: 2-layer decoder, test split, all 10 seeds (lr chosen on seeds 1-3, which are among them); training stops at 99% validation token accuracy, which is not the success rule"
    echo
    "${table[@]}" --lr-estimate held-out --metric 'test_token_acc:success>=0.99' --metric 'test_token_acc:success>=0.95' \
        --metric test_token_acc:median \
        --title "Seeds 4-10 only: the runs that took no part in choosing the lr (free of the winner's curse)"
  } > "$o/results.md"
}

retrieval() {
  local o; o=$(out_dir retrieval); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=300)
  sweep experiments/retrieval/sweep.yaml retrieval "${q[@]}"
  $py $S/retrieval.py $runs/retrieval "$o" --qkv "$qkv" > "$o/results.md"  # runs.csv, heads.csv and the tables
}

grokking() {
  local o; o=$(out_dir grokking); mkdir -p "$o"
  local q=(); [ $quick = 1 ] && q=(--set train.steps=200)
  sweep experiments/grokking/sweep.yaml grokking "${q[@]}"
  score "$o/runs.csv" $runs/grokking -- --columns task.vocab
  $py $S/grokking.py "$o/runs.csv" $runs/grokking --out "$o/grokking.png" --steps "$o/steps.csv" > "$o/results.md"
}

# The pilot's sweep directories: its grid, then one per extension of the grid.
pilot_dirs() {
  echo "$runs/$1/pilot"
  [ -d "$runs/$1/pilot_ext" ] && find "$runs/$1/pilot_ext" -mindepth 1 -maxdepth 1 -type d | sort
  return 0
}
# chosen_lrs NAME KEY OUT: the lr each setting of KEY took (roles.py select over the pilot and its
# extensions) into OUT; without the pilot's sweeps (--report-only on a checkout) the committed OUT
# is kept.
chosen_lrs() {
  local name=$1 key=$2 out=$3
  if [ ! -d "$runs/$name/pilot" ]; then
    echo "run.sh: no pilot in $runs/$name: $out not rewritten" >&2
    return 0
  fi
  $py $S/roles.py select --key $key $(pilot_dirs $name) > "$out.new"
  mv "$out.new" "$out"
}
# pilot_csv NAME OUT: every run of NAME's pilot and its extensions (their results.csv rows, with the
# commit of the training binary and the CPU: provenance.py) into OUT, the pilot CSV committed beside
# the lr file (lr_grid.py chooses again from it); without the pilot's sweeps (--report-only on a
# checkout) the committed OUT is kept.
pilot_csv() {
  local name=$1 out=$2 first=1 d
  [ -d "$runs/$name/pilot" ] || return 0
  for d in $(pilot_dirs $name); do
    [ -f "$d/results.csv" ] || continue
    if [ $first = 1 ]; then cat "$d/results.csv"; first=0; else tail -n +2 "$d/results.csv"; fi
  done | $py $S/provenance.py annotate --qkv "$qkv" > "$out.new"
  mv "$out.new" "$out"
}
# has_sweeps NAME DIR...: whether there are sweeps to report from; without them (--report-only on a
# checkout) NAME's results.md is kept, and a message says so.
has_sweeps() {
  local name=$1; shift
  [ $# -gt 0 ] && return 0
  echo "run.sh: no sweeps of $name in $runs: experiments/$name/results.md kept" >&2
  return 1
}
# below_min_lr SWEEP_FILE LR: "--set schedule.min_lr=LR" when LR is below the schedule's min_lr
# (the sweep file's `set:`, else its base config's): a grid extended below min_lr runs at a constant
# lr after warmup, as a run whose lr equals min_lr does. Nothing otherwise.
below_min_lr() {
  $py - "$1" "$2" <<'EOF'
import sys, yaml
from pathlib import Path
sweep = yaml.safe_load(open(sys.argv[1]))
base = yaml.safe_load(open(Path(sys.argv[1]).parent / sweep["base"])) if sweep.get("base") else {}
m = (sweep.get("set") or {}).get("schedule.min_lr", (base.get("schedule") or {}).get("min_lr", 0))
if float(sys.argv[2]) < float(m):
    print(f"--set schedule.min_lr={sys.argv[2]}")
EOF
}
# sweep_lr DIR: the optimizer.lr of the sweep's first run (its resolved config.yaml); nothing
# when DIR holds no run.
sweep_lr() {
  local c; c=$(find "$1" -mindepth 3 -maxdepth 3 -name config.yaml 2>/dev/null | sort | head -1)
  [ -n "$c" ] || return 0
  $py -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['optimizer']['lr'])" "$c"
}
# pilot_then_main NAME QUICK_STEPS QUICK_WARMUP [KEY PREFIX]: the lr pilot of
# experiments/NAME/pilot.yaml (tuning seeds), the grid extended by a half-decade beyond any edge lr
# (up to twice: an lr still at the edge is reported as such), then the main sweep of each setting of
# KEY (default model.heads, directories h<value>; lm_dk: model.head_dim, dk<value>) at its lr;
# prints the main sweep directories.
pilot_then_main() {
  local name=$1 key=${4:-model.heads} pre=${5:-h} q=() h lr where next round edges
  if [ $report_only = 1 ]; then  # no training: the main sweeps that are here, if any
    [ -d "$runs/$name/main" ] && find "$runs/$name/main" -mindepth 1 -maxdepth 1 -type d -not -name "*.lr*" | sort -V
    return 0
  fi
  [ $quick = 1 ] && q=(--set train.steps=$2 --set schedule.warmup_steps=$3)
  # A sweep with failed runs goes on to the next (they are retried on the next call; the report
  # counts what finished). stdin is not the sweeps': the loops below read it.
  sweep experiments/$name/pilot.yaml $name/pilot "${q[@]}" >&2 < /dev/null || echo "run.sh: $name: the pilot has failed runs" >&2
  for round in 1 2; do
    edges=0
    while read -r h lr where next; do
      [ "$where" = EDGE ] || continue
      edges=1
      echo "run.sh: $name: $key = $h chose lr $lr, an edge of the pilot's grid: extending it to $next" >&2
      sweep experiments/$name/pilot.yaml $name/pilot_ext/$pre${h}_lr$next --grid $key=$h --grid optimizer.lr=$next \
          $(below_min_lr experiments/$name/pilot.yaml $next) "${q[@]}" >&2 < /dev/null \
          || echo "run.sh: $name: the extension at lr $next has failed runs" >&2
    done < <($py $S/roles.py select --key $key $(pilot_dirs $name))
    [ $edges = 0 ] && break
  done
  local main old
  while read -r h lr where next; do
    [ "$where" = EDGE ] && echo "run.sh: $name: $key = $h still chooses an edge lr ($lr) after two extensions" >&2
    # A main sweep made at another lr (the pilot's choice has changed since) is kept aside, not
    # mixed in: a sweep skips the runs it finds finished, whatever their config.
    main=$runs/$name/main/$pre$h old=$(sweep_lr "$main")
    if [ -n "$old" ] && ! $py -c "import sys; sys.exit(abs(float('$old') / float('$lr') - 1) > 1e-9)"; then
      echo "run.sh: $name: $main ran at lr $old, the pilot now chooses $lr: moved to $main.lr$old" >&2
      mv "$main" "$main.lr$old"
    fi
    sweep experiments/$name/main.yaml $name/main/$pre$h --grid $key=$h --set optimizer.lr=$lr \
        $(below_min_lr experiments/$name/main.yaml $lr) "${q[@]}" >&2 < /dev/null \
        || echo "run.sh: $name: $key = $h has failed runs" >&2
    echo "$runs/$name/main/$pre$h"
  done < <($py $S/roles.py select --key $key $(pilot_dirs $name))
}

# Who and what heads (experiments/roles/README.md): role scores, head similarity and single-head
# ablations of every reported run.
roles() {
  local o; o=$(out_dir roles); mkdir -p "$o"
  local dirs; mapfile -t dirs < <(pilot_then_main roles 200 20)
  chosen_lrs roles model.heads "$o/lr.txt"
  has_sweeps roles "${dirs[@]}" || return 0
  pilot_csv roles "$o/pilot.csv"
  $py $S/roles.py analyse "${dirs[@]}" --out "$o" --qkv "$qkv" --jobs "$jobs"
  $py $S/roles.py report "$o" --plot > "$o/results.md"
}

# Roles v2 (experiments/roles_v2/README.md): four pilots and their reported runs (fixed width and
# fixed head size, 2 and 4 layers; the 2-layer half first), then every head's scores at the masked
# positions, mean ablations over mask draws and the tests (roles_v2.py, with --analysis-qkv).
roles_v2() {
  local o; o=$(out_dir roles_v2); mkdir -p "$o"
  local sub part dirs=() pilots=()
  for sub in width_L2 headsize_L2 width_L4 headsize_L4; do
    mkdir -p "$o/$sub"
    mapfile -t part < <(pilot_then_main roles_v2/$sub 200 20)
    chosen_lrs roles_v2/$sub model.heads "$o/$sub/lr.txt"
    pilot_csv roles_v2/$sub "$o/$sub/pilot.csv"
    dirs+=("${part[@]}")
    [ -d "$runs/roles_v2/$sub/pilot" ] && pilots+=($(pilot_dirs roles_v2/$sub))
  done
  has_sweeps roles_v2 "${dirs[@]}" || return 0
  $py $S/plateau.py curves "${pilots[@]}" "${dirs[@]}" --out "$o/curves.csv.gz"
  $py $S/roles_v2.py analyse "${dirs[@]}" --out "$o" --qkv "$analysis_qkv" --train-qkv "$qkv" --jobs "$jobs"
  $py $S/roles_v2.py report "$o" > "$o/results.md"
}

# lm_experiment NAME KEY PREFIX [LM_HEADS_OPTION...]: an lr pilot then the main sweeps of a language
# model's setting KEY (pilot_then_main), scored at the last step, reported by lm_heads.py.
lm_experiment() {
  local name=$1 key=$2 pre=$3; shift 3
  local o; o=$(out_dir $name); mkdir -p "$o"
  local dirs; mapfile -t dirs < <(pilot_then_main $name 200 20 $key $pre)
  chosen_lrs $name $key "$o/lr.txt"
  pilot_csv $name "$o/pilot.csv"
  has_sweeps $name "${dirs[@]}" || return 0
  $py $S/score.py "${dirs[@]}" --checkpoint last.h5 --columns $key --out "$o/runs.csv" --jobs "$jobs" --qkv "$qkv"
  $py $S/lm_heads.py "$o/runs.csv" "${dirs[@]}" --out "$o" --key $key "$@" > "$o/results.md"
}
# Heads at fixed width on a character LM trained to its budget (experiments/lm_heads/README.md).
lm_heads() { lm_experiment lm_heads model.heads h; }
# The key size d_k at fixed width and d_v on a character LM (experiments/lm_dk/README.md).
lm_dk() { lm_experiment lm_dk model.head_dim dk; }
# Heads at fixed width on the Chinese masked character LM, scored on the masked characters
# (experiments/lm_heads_zh/README.md).
lm_heads_zh() { lm_experiment lm_heads_zh model.heads h --name lm_heads_zh; }
# The key size d_k at fixed width and d_v on the Chinese masked character LM
# (experiments/lm_dk_zh/README.md).
lm_dk_zh() { lm_experiment lm_dk_zh model.head_dim dk --name lm_dk_zh; }

if [ $status = 1 ]; then
  for n in "${names[@]}"; do $py $S/status.py "$n" "$runs" --jobs "$jobs"; done
  exit 0
fi
for n in "${names[@]}"; do
  echo "== $n ($(date -u +%T))"
  "$n"
done
echo "done ($(date -u +%T)): reports in $( [ $quick = 1 ] && echo "$runs/*/report" || echo "experiments/*/")"
