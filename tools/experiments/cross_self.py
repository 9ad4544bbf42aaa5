#!/usr/bin/python3
"""The retrieval table of experiments/cross_self: per arm, at the lr each arm chose on validation
token accuracy, how many runs have a head whose strongest weight lands on the queried key (or its
value) for at least half the scored queries, and the best such score, solved runs and others apart.

    cross_self.py ARM.csv... --heads ARM_heads.csv...

ARM.csv: score.py output with an `arm` column; ARM_heads.csv: its --heads output (retrieval is
scored on self and causal layers for recall, on the cross-attention layers for seq2seq_recall).
"""
import argparse
import collections
import csv
import math
import statistics


def wilson(k, n, z=1.96):
    if n == 0:
        return math.nan, math.nan
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--heads", nargs="+", required=True)
    a = ap.parse_args()
    runs = [r for f in a.runs for r in csv.DictReader(open(f))]
    heads = collections.defaultdict(list)
    for f, arm_file in zip(a.heads, a.runs):
        arm = next(csv.DictReader(open(arm_file)))["arm"]
        for h in csv.DictReader(open(f)):
            if h["retrieval"] not in ("", "nan"):
                heads[(arm, h["run"])].append(h)
    by_arm = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in runs:
        by_arm[r["arm"]][r["lr"]].append(r)
    print("| arm | lr | runs | solved (test >= 99%) | runs with a retrieval head | its layer | best retrieval score, solved runs | unsolved runs | value swap, solved runs: intact / follow / stay | unsolved runs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arm, lrs in by_arm.items():
        lr = max(sorted(lrs), key=lambda v: statistics.mean(float(r["val_token_acc"]) for r in lrs[v]))
        rs = lrs[lr]
        solved = [r for r in rs if float(r["test_token_acc"]) >= 0.99]
        best = {r["run"]: max(heads[(arm, r["run"])], key=lambda h: float(h["retrieval"]), default=None) for r in rs}
        with_head = [r for r in rs if best[r["run"]] and float(best[r["run"]]["retrieval"]) >= 0.5]
        layers = sorted({best[r["run"]]["layer"] for r in with_head})
        def scores(group):
            v = [float(best[r["run"]]["retrieval"]) for r in group if best[r["run"]]]
            return f"{min(v):.2f} to {max(v):.2f}" if v else "-"
        def swap(group):
            if not group:
                return "-"
            med = lambda k: statistics.median(float(r[k]) for r in group)
            return f"{med('swap_intact'):.2f} / {med('swap_follow'):.2f} / {med('swap_stay'):.2f}"
        lo, hi = wilson(len(with_head), len(rs))
        slo, shi = wilson(len(solved), len(rs))
        print(f"| {arm} | {lr} | {len(rs)} | {len(solved)}/{len(rs)} [{slo:.2f}, {shi:.2f}] | "
              f"{len(with_head)}/{len(rs)} [{lo:.2f}, {hi:.2f}] | {', '.join(layers) or '-'} | {scores(solved)} | "
              f"{scores([r for r in rs if r not in solved])} | {swap(solved)} | {swap([r for r in rs if r not in solved])} |")
    print("\n_Per arm, the lr with the highest mean validation token accuracy. Retrieval head: a head whose "
          "largest attention weight falls on the queried key or its value for at least half the scored test "
          "queries (qkv heads, docs/instruments.md). Value swap (qkv swap): medians over the solved and the unsolved runs "
          "of the share of the swapped key's queries right before the swap, predicting the new value after it, and "
          "still predicting the old one. Intervals: Wilson 95%._")


if __name__ == "__main__":
    main()
