#!/usr/bin/env bash
# Regenerate the first report (experiments/first-report/README.md): sweeps, tables, plots, README blocks.
#
#   tools/run_experiments.sh [--quick] [--jobs N] [--only "heads head_dim head_dim_h4 scaling dropout"]
#                              [--report-only] [--qkv PATH]
#
# --quick        the reduced variants (configs/experiments/quick/, a few minutes each)
# --jobs N       runs at once (each on one thread; default 2)
# --report-only  no training: tables and plots from what the sweep directories hold
# Sweeps go to runs/experiments[-quick]/<name> (finished runs are skipped, interrupted ones
# resume), tables and PNGs to experiments/first-report/<full|quick>/. Each README block is filled
# from the full variant when its table exists, else from the quick one. Training runs under nice -n 19.
set -euo pipefail
cd "$(dirname "$0")/.."

variant=full
jobs=2
only="heads head_dim head_dim_h4 scaling dropout"
report_only=0
qkv=build/qkv
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) variant=quick ;;
    --jobs) jobs="$2"; shift ;;
    --only) only="$2"; shift ;;
    --report-only) report_only=1 ;;
    --qkv) qkv="$2"; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run_experiments.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

cfg=configs/experiments
runs=runs/experiments
if [ "$variant" = quick ]; then cfg=configs/experiments/quick; runs=runs/experiments-quick; fi
out=experiments/first-report/$variant
report="/usr/bin/python3 tools/sweep_report.py"
mkdir -p "$out"
[ -x "$qkv" ] || { echo "run_experiments.sh: $qkv not found; build first (make build) or pass --qkv" >&2; exit 2; }

# Header line of every generated block: which variant, which command, when.
stamp() {
  local steps
  steps=$(awk '/train.steps:/{print $2; exit}' "$cfg/$1.yaml")
  [ -n "$steps" ] || steps=$(awk '/^train:/{t=1} t&&/steps:/{print $2; exit}' configs/experiments/recall.yaml)
  local seeds
  seeds=$(awk '/^seeds:/{sub(/^seeds: */, ""); print; exit}' "$cfg/$1.yaml")
  echo "_Numbers from the **$variant** variant ($steps steps per run, seeds $seeds): \`qkv sweep $cfg/$1.yaml\`," \
       "report by \`tools/run_experiments.sh$([ "$variant" = quick ] && echo " --quick")\`, $(date -u +%Y-%m-%d)._"
  echo
}

heads_report() {
  local s=$runs/heads
  { stamp heads
    $report table $s --metrics final_token_acc,final_seq_acc,final_loss,steps_to_target,attn_entropy,attn_max_weight,wall_s
    echo
    echo "![held-out curves]($variant/heads_curves.png) ![final vs heads]($variant/heads_final.png)"
    echo
    echo "Attention maps of trained models (seed 1, held-out example 0, \`qkv attention\`; rows are queries,"
    echo "columns keys; \`k3\` is key symbol 3, \`v5\` value symbol 5; black 0, white 1):"
    echo
    echo "![heads=4 layer 0]($variant/attention_h4_layer0.png) ![heads=4 layer 1]($variant/attention_h4_layer1.png)"
    echo "![heads=16 layer 1]($variant/attention_h16_layer1.png)"
  } > $out/heads.md
  $report curves $s --metrics eval_token_acc,eval_loss --title "heads: held-out curves (mean ± std over seeds)" --out $out/heads_curves.png
  $report final $s --x model.heads --logx --metrics final_token_acc,steps_to_target --out $out/heads_final.png
  { stamp heads
    $report table $s --metrics attn_redundancy,attn.redundancy@100,attn_entropy,final_token_acc
    echo
    echo "![redundancy vs heads]($variant/redundancy_final.png) ![redundancy during training]($variant/redundancy_curves.png)"
  } > $out/redundancy.md
  $report final $s --x model.heads --logx --metrics attn_redundancy,attn.redundancy@100 --out $out/redundancy_final.png
  $report curves $s --where "model.heads=2|4|8|16|32" --metrics attn.redundancy --out $out/redundancy_curves.png
  # Attention maps of trained models: every head of each layer for held-out example 0.
  local h
  for h in 4 16; do
    local ck=$s/runs/heads=${h}_seed=1/best.h5
    [ -f "$ck" ] || continue
    "$qkv" attention "$ck" --example 0 --out $s/attention_h$h.csv > /dev/null
    local layer
    for layer in 0 1; do
      [ $h = 16 ] && [ $layer = 0 ] && continue
      $report attention $s/attention_h$h.csv --layer blocks.$layer.attn --value-offset 8 \
        --title "heads=$h, layer $layer (seed 1, held-out example 0): rows queries, columns keys" \
        --out $out/attention_h${h}_layer$layer.png
    done
  done
}

# A d_k sweep (scaled): table, held-out curves, final metrics against d_k. $1 = sweep name.
dk_report() {
  local s=$runs/$1
  { stamp $1
    $report table $s --metrics final_token_acc,final_seq_acc,final_loss,steps_to_target,attn_entropy,attn_max_weight,wall_s
    echo
    echo "![held-out curves]($variant/$1_curves.png) ![final vs d_k]($variant/$1_final.png)"
  } > $out/$1.md
  $report curves $s --metrics eval_token_acc,eval_loss --title "$2: held-out curves" --out $out/$1_curves.png
  $report final $s --x model.head_dim --logx --metrics final_token_acc,steps_to_target --out $out/$1_final.png
}
head_dim_report() { dk_report head_dim "d_k (1 head, scaled)"; }
head_dim_h4_report() { dk_report head_dim_h4 "d_k at 4 heads (scaled)"; }

# The scaled arm is the head_dim sweep, the unscaled arm the scaling sweep.
scaling_report() {
  local s=$runs/head_dim+$runs/scaling dims="model.head_dim=16|64|256|512"
  { stamp scaling
    $report table $s --where "$dims" \
      --metrics final_token_acc,steps_to_target,attn.entropy@50,attn.max_weight@50,attn.grad_q@50,attn_entropy,attn_max_weight,attn_grad_q,attn_grad_k
    echo
    echo "![diagnostics during training]($variant/scaling_diagnostics.png)"
    echo "![held-out curves]($variant/scaling_curves.png) ![diagnostics vs d_k]($variant/scaling_final.png)"
    echo
    echo "The head of each layer at d_k 512 (seed 1, held-out example 0), scaled (scale=0) and unscaled (scale=1):"
    echo
    echo "![scaled layer 0]($variant/attention_dk512_scale0_layer0.png) ![scaled layer 1]($variant/attention_dk512_scale0_layer1.png)"
    echo "![unscaled layer 0]($variant/attention_dk512_scale1_layer0.png) ![unscaled layer 1]($variant/attention_dk512_scale1_layer1.png)"
  } > $out/scaling.md
  $report curves $s --where "model.head_dim=16|512" --metrics attn.entropy,attn.max_weight,attn.grad_q,attn.grad_k \
    --log attn.grad_q,attn.grad_k --title "d_k 16 and 512, scaled (scale=0) and unscaled (scale=1)" --out $out/scaling_diagnostics.png
  $report curves $s --where "$dims" --metrics eval_token_acc,eval_loss --out $out/scaling_curves.png
  $report final $s --where "$dims" --x model.head_dim --group model.scale --group-labels "0=1/sqrt(d_k),1=unscaled" --logx \
    --metrics final_token_acc,attn.entropy@50,attn.max_weight@50,attn.grad_q@50 --out $out/scaling_final.png
  # The one head of each layer at d_k 512, with and without the scale (seed 1, held-out example 0).
  local scale sweep
  for scale in 0 1; do
    sweep=$runs/head_dim; [ $scale = 1 ] && sweep=$runs/scaling
    local ck=$sweep/runs/head_dim=512_scale=${scale}_seed=1/best.h5
    [ -f "$ck" ] || continue
    "$qkv" attention "$ck" --example 0 --out $sweep/attention_512_$scale.csv > /dev/null
    for layer in 0 1; do
      $report attention $sweep/attention_512_$scale.csv --layer blocks.$layer.attn --value-offset 8 \
        --title "d_k 512, scale=$scale, layer $layer" --out $out/attention_dk512_scale${scale}_layer$layer.png
    done
  done
}

dropout_report() {
  local s=$runs/dropout
  { stamp dropout
    $report table $s --metrics train_token_acc,final_token_acc,best_token_acc,final_seq_acc,final_loss
    echo
    echo "![curves]($variant/dropout_curves.png) ![final vs p]($variant/dropout_final.png)"
  } > $out/dropout.md
  $report curves $s --metrics train_token_acc,eval_token_acc,eval_loss --title "dropout: train (fixed 128-example set) and held-out" --out $out/dropout_curves.png
  $report final $s --x model.dropout --metrics train_token_acc,final_token_acc,final_loss --out $out/dropout_final.png
}

status=0
for e in $only; do
  if [ $report_only = 0 ]; then
    echo "== sweep $cfg/$e.yaml ($jobs jobs)"
    nice -n 19 "$qkv" sweep "$cfg/$e.yaml" --jobs "$jobs" --threads 1 || { echo "some runs of $e failed (see their train.log)"; status=1; }
  fi
  if [ -f "$runs/$e/results.csv" ] && { [ $e != scaling ] || [ -f "$runs/head_dim/results.csv" ]; }; then
    echo "== report $e ($variant)"
    ${e}_report
  else
    echo "== no results for $e in $runs/$e: skipped"
  fi
done

# README blocks: full variant when present, else quick.
blocks=()
for b in heads redundancy head_dim head_dim_h4 scaling dropout; do
  if [ -f experiments/first-report/full/$b.md ]; then blocks+=("$b=experiments/first-report/full/$b.md")
  elif [ -f experiments/first-report/quick/$b.md ]; then blocks+=("$b=experiments/first-report/quick/$b.md"); fi
done
[ ${#blocks[@]} -gt 0 ] && $report fill experiments/first-report/README.md "${blocks[@]}"
exit $status
