#!/usr/bin/python3
"""Roles v2 (experiments/roles_v2/README.md): is there a who head when position cannot answer, and
does it matter? Every head's role scores at the masked positions, the run's role heads chosen on
validation rows, mean ablations over mask draws, and the tests stated in the README.

    roles_v2.py analyse SWEEP_DIR... --out DIR [--qkv build/qkv] [--train-qkv runs/bin/qkv-HASH]
                                     [--examples 512] [--draws 4] [--jobs 2]
    roles_v2.py report DIR                         the tables and tests (markdown) from DIR's files

SWEEP_DIRs are the reported sweeps, runs/exp/roles_v2/<arm>_L<layers>/main/h<heads>. analyse
appends, per finished run not yet in DIR/runs.csv (so it resumes; a run is done once its runs.csv
row is written, after its other rows):
- DIR/runs.csv: the setting (arm, layers, heads, head_dim), seed, lr, validation and test masked
  loss and accuracy, the plateau verdict (plateau.py), the training and analysis commits and the
  CPU (vendor, family, model: `qkv info`), ISA and BLAS kernel;
- DIR/roles.csv: per run and relation, the head chosen on the validation rows (largest
  R@validation), its test score at the masked tokens s_R (R@scored), the offset chosen on
  validation o_R and its test share b_R, the margin d_R = s_R - b_R, has_head (s_R >= 0.5 and
  d_R >= 0.1), its score where o_R misses (R@off_offset) and over every token (R), the most heads'
  role labels, the largest test score of any head (described only: chosen on test);
- DIR/heads.csv.gz: every head of every run, every column of `qkv heads --json` and its labels;
- DIR/ablation.csv.gz: per run and ablated head, mean ablation (hook_z <- its mean over the
  validation set) over `--draws` re-maskings of the test rows' sentences: the change of the mean
  masked-token loss on the tokens having each of verb->subject and verb->object and on the other
  masked tokens, and c_R = the first minus the second; which heads are the run's R heads; an
  `attribution` column left empty (the hook below).
Heads ablated: every head of a model with at most 16, else the validation-chosen who and what
heads and 16 others drawn uniformly (seeded by the run's seed).
"""
import argparse
import concurrent.futures
import csv
import gzip
import json
import math
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments import plateau  # noqa: E402
from experiments import provenance  # noqa: E402
from experiments import stats  # noqa: E402

WHO, WHAT = "verb->subject", "verb->object"
TESTED = [WHO, WHAT]
ARGUMENT = [WHO, WHAT, "subject->verb", "object->verb"]
ROLE_MIN, MARGIN = 0.5, 0.1  # the library's role label (interp::LabelThresholds)
MAX_ALL_HEADS, RANDOM_HEADS = 16, 16
MASK_RATE = 0.15


def fail(msg):
    print(f"roles_v2.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_csv(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        return list(csv.DictReader(f))


def append(path, rows, fields=None):
    """Append rows to a CSV (a gzip member per call for .gz: a valid multi-member gzip file)."""
    if not rows:
        return
    fields = fields or list(rows[0].keys())
    new = not Path(path).exists()
    opener = (lambda p: gzip.open(p, "at", newline="")) if str(path).endswith(".gz") else (lambda p: open(p, "a", newline=""))
    with opener(path) as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)


def setting_of(sweep_dir):
    """(arm, layers) from runs/exp/roles_v2/<arm>_L<layers>/main/h<h>."""
    m = re.search(r"(width|headsize)_L(\d+)", str(sweep_dir))
    if not m:
        fail(f"{sweep_dir}: not a roles_v2 sweep directory (<arm>_L<layers>/main/h<h>)")
    return m.group(1), int(m.group(2))


def attribution(ckpt, heads):
    """The hook for attribution (the causal-instruments issue: attribution patching, EAP-IG): per
    head (layer, head) a score of its effect on the masked-token loss, or None while the library
    has no such instrument. Its values fill ablation.csv's `attribution` column."""
    return None


# ---- masking, as the task masks (docs/models.md) ----

def remask(batch, draw_seed, tok_size):
    """The batch's sentences masked anew: per row of n sentence tokens (words >= 0), max(1,
    round(0.15 n)) positions chosen uniformly, 80% -> [MASK], 10% -> a token uniform in
    [0, tok_size - 1), 10% kept; targets the originals there, -100 elsewhere."""
    inputs, targets, words = batch["inputs"], batch["targets"], batch["words"]
    orig = np.where(targets >= 0, targets, inputs)
    rng = np.random.default_rng(draw_seed)
    x = orig.copy()
    y = np.full_like(orig, -100)
    mask_id = tok_size + 1
    for b in range(orig.shape[0]):
        pos = np.flatnonzero(words[b] >= 0)
        n = len(pos)
        if n == 0:
            continue
        m = min(n, max(1, int(math.floor(MASK_RATE * n + 0.5))))
        chosen = pos[rng.choice(n, m, replace=False)]
        u = rng.random(m)
        y[b, chosen] = orig[b, chosen]
        x[b, chosen[u < 0.8]] = mask_id
        rand = chosen[(u >= 0.8) & (u < 0.9)]
        x[b, rand] = rng.integers(0, tok_size - 1, len(rand))
    return {"inputs": x, "targets": y}


def token_losses(logits, targets):
    """Cross-entropy (nats) at the positions with a target, in row-major order."""
    sel = targets >= 0
    z = logits[sel].astype(np.float64)
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    return lse - z[np.arange(len(z)), targets[sel]]


# ---- analyse ----

def qkv_json(binary, *args):
    r = subprocess.run([binary, *args, "--json", "--threads", "1"], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"qkv {' '.join(args)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def analyse_run(a, job):
    import qkv as q  # build/python: the library's Python module
    q.set_num_threads(1)
    sweep, row, arm, layers, hw, commits = job
    run_dir = Path(sweep) / "runs" / row["run"]
    ck = str(run_dir / "last.h5")
    seed, heads = int(row["seed"]), int(row["model.heads"])
    cfg = __import__("yaml").safe_load(open(run_dir / "config.yaml"))
    head_dim = int(cfg["model"].get("head_dim") or 0) or cfg["model"]["d_model"] // heads
    key = {"run": row["run"], "arm": arm, "layers": layers, "heads": heads, "head_dim": head_dim, "seed": seed}

    # Every head's scores (the library's, test rows; offsets and R@validation on validation rows).
    hj = qkv_json(a.qkv, "heads", ck, "--examples", str(a.examples))
    names = hj["score_names"]
    relations = list(hj["offsets"].keys())
    head_rows = []
    for h in hj["heads"]:
        r = {**key, "layer": h["layer_index"], "head": h["head"]}
        for n in names:
            r[n] = "" if h[n] is None else h[n]
        r["label"], r["role_label"] = h["label"], h["role_label"]
        head_rows.append(r)

    def val(h, n):
        return float("nan") if h[n] is None else float(h[n])

    roles, chosen = [], {}
    for rel in relations:
        off = hj["offsets"][rel]
        best = max(hj["heads"], key=lambda h: (-math.inf if math.isnan(val(h, rel + "@validation")) else val(h, rel + "@validation")))
        s, b = val(best, rel + "@scored"), float("nan") if off["share"] is None else float(off["share"])
        chosen[rel] = (best["layer_index"], best["head"])
        top = max((val(h, rel + "@scored") for h in hj["heads"] if not math.isnan(val(h, rel + "@scored"))), default=float("nan"))
        roles.append({**key, "relation": rel, "head_layer": best["layer_index"], "head_index": best["head"],
                      "validation_score": val(best, rel + "@validation"), "score": s, "offset": off["offset"],
                      "offset_validation_share": off["validation_share"], "offset_share": b, "margin": s - b,
                      "has_head": int(s >= ROLE_MIN and s - b >= MARGIN), "off_offset_score": val(best, rel + "@off_offset"),
                      "every_token_score": val(best, rel), "scored_tokens": off["count"],
                      "off_offset_tokens": off["off_offset_count"],
                      "heads_labelled": sum(h["role_label"] == "role: " + rel for h in hj["heads"]),
                      "best_test_score": top})

    # Mean ablation over mask draws.
    m = q.load(ck)
    ev = {s["split"]: s for s in q.evaluate(m)["splits"]}
    test = m.held_out("test", a.examples)
    valid = m.held_out("validation")
    tok_size = m.cfg.d_vocab_out
    hooks = [n for n in m.hook_names if n.endswith("attn.hook_z")]
    _, cache = m.run_with_cache({"inputs": valid["inputs"]}, names_filter=hooks)
    means = [np.asarray(cache[n]).mean(axis=(0, 2)) for n in hooks]  # per layer (H, D): every example and position
    all_heads = [(l, h) for l in range(len(hooks)) for h in range(means[l].shape[0])]
    if len(all_heads) <= MAX_ALL_HEADS:
        ablate = list(all_heads)
    else:
        rng = np.random.default_rng([seed, 7])
        drawn = [all_heads[i] for i in rng.choice(len(all_heads), RANDOM_HEADS, replace=False)]
        ablate = sorted(set(drawn) | {chosen[WHO], chosen[WHAT]})
    rel_index = {rel: relations.index(rel) for rel in TESTED}
    deltas = {hd: {rel: [[], []] for rel in TESTED} for hd in ablate}  # [on R's tokens, on the others]
    intransitive = {hd: [] for hd in ablate}  # on the masked verbs with a subject and no object
    for d in range(a.draws):
        batch = remask(test, [seed, d], tok_size)
        sel = batch["targets"] >= 0
        groups = {rel: test["relations"][:, rel_index[rel], :][sel] >= 0 for rel in TESTED}
        intact = token_losses(m.run_with_hooks({"inputs": batch["inputs"]}), batch["targets"])
        for (l, h) in ablate:
            def fn(z, hook, h=h, mu=means[l][h]):
                z = np.array(z, copy=True)
                z[:, h] = mu
                return z
            lost = token_losses(m.run_with_hooks({"inputs": batch["inputs"]}, fwd_hooks=[(hooks[l], fn)]), batch["targets"])
            diff = lost - intact
            for rel in TESTED:
                deltas[(l, h)][rel][0].append(diff[groups[rel]])
                deltas[(l, h)][rel][1].append(diff[~groups[rel]])
            intransitive[(l, h)].append(diff[groups[WHO] & ~groups[WHAT]])
    attr = attribution(ck, ablate)
    abl_rows = []
    for hd in ablate:
        r = {**key, "layer": hd[0], "head": hd[1], "draws": a.draws}
        for rel in TESTED:
            on = np.concatenate(deltas[hd][rel][0])
            other = np.concatenate(deltas[hd][rel][1])
            short = "who" if rel == WHO else "what"
            r[f"is_{short}_head"] = int(hd == chosen[rel])
            r[f"loss_change_{short}_tokens"] = float(on.mean()) if len(on) else float("nan")
            r[f"loss_change_other_{short}"] = float(other.mean()) if len(other) else float("nan")
            r[f"specific_{short}"] = r[f"loss_change_{short}_tokens"] - r[f"loss_change_other_{short}"]
            r[f"{short}_tokens"] = len(on)
        # Every verb with an object has a subject too, so c_who and c_what contrast nearly the same
        # tokens (the masked verbs) with the rest: described beside them, the what head's cost on the
        # verbs with an object against the verbs without one (verbs both, only the object differs).
        intr = np.concatenate(intransitive[hd])
        r["loss_change_intransitive"] = float(intr.mean()) if len(intr) else float("nan")
        r["intransitive_tokens"] = len(intr)
        r["what_vs_intransitive"] = r["loss_change_what_tokens"] - r["loss_change_intransitive"]
        r["attribution"] = "" if attr is None else attr.get(hd, "")
        abl_rows.append(r)

    pv = plateau.check(run_dir)
    run = {**key, "lr": cfg["optimizer"]["lr"], "steps": row.get("steps", ""),
           "val_loss": ev["validation"]["loss"], "val_acc": ev["validation"]["token_accuracy"],
           "test_loss": ev["test"]["loss"], "test_acc": ev["test"]["token_accuracy"],
           "plateau": pv["verdict"], "plateau_gain": pv["gain"], "plateau_rise": pv["rise"],
           "cooldown_gain": pv["cooldown"], **commits, **hw}
    return {"runs": [run], "roles": roles, "heads": head_rows, "ablation": abl_rows}


def cmd_analyse(a):
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    done = {r["run"] + "@" + r["arm"] + r["layers"] for r in read_csv(out / "runs.csv")} if (out / "runs.csv").exists() else set()
    hw = provenance.machine_columns(a.qkv)
    commits = {"train_commit": provenance.binary_commit(a.train_qkv) if a.train_qkv else "unknown",
               "analysis_commit": provenance.git_commit()}
    jobs = []
    for d in a.sweeps:
        arm, layers = setting_of(d)
        res = Path(d) / "results.csv"
        if not res.exists():
            continue
        for r in read_csv(res):
            if r.get("status") in ("steps", "target") and r["run"] + "@" + arm + str(layers) not in done:
                jobs.append((d, r, arm, layers, hw, commits))
    print(f"roles_v2.py: {len(jobs)} runs to analyse", file=sys.stderr)
    env_path = str(Path(a.qkv).resolve().parent / "python")
    os.environ["PYTHONPATH"] = env_path + os.pathsep + os.environ.get("PYTHONPATH", "")
    sys.path.insert(0, env_path)
    with concurrent.futures.ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for result in pool.map(analyse_run, [a] * len(jobs), jobs):
            # Every other file before runs.csv: a run is done once its runs.csv row is written.
            append(out / "roles.csv", result["roles"])
            append(out / "heads.csv.gz", result["heads"])
            append(out / "ablation.csv.gz", result["ablation"])
            append(out / "runs.csv", result["runs"])


# ---- report ----

def fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def mean(v):
    v = [x for x in v if not math.isnan(x)]
    return sum(v) / len(v) if v else float("nan")


def settings(runs):
    keys = sorted({(r["arm"], int(r["layers"]), int(r["heads"])) for r in runs}, key=lambda k: (k[1], k[0] != "width", k[2]))
    return keys


def in_arm(r, arm, layers, heads):
    """A run of the setting; the fixed-head-size arm shares width's h = 8 (d_k = 8: the same model)."""
    if int(r["layers"]) != layers or int(r["heads"]) != heads:
        return False
    return r["arm"] == arm or (arm == "headsize" and heads == 8 and r["arm"] == "width")


def cmd_report(a):
    d = Path(a.dir)
    runs, roles = read_csv(d / "runs.csv"), read_csv(d / "roles.csv")
    done = {(r["run"], r["arm"], r["layers"]) for r in runs}
    roles = [r for r in roles if (r["run"], r["arm"], r["layers"]) in done]
    abl = [r for r in read_csv(d / "ablation.csv.gz") if (r["run"], r["arm"], r["layers"]) in done] \
        if (d / "ablation.csv.gz").exists() else []
    cpus = sorted({r["cpu"] for r in runs})
    commits = sorted({(r["train_commit"], r["analysis_commit"]) for r in runs})
    print(f"{len(runs)} reported runs; CPU: {', '.join(cpus)}; trained by {', '.join(c[0] for c in commits)}, analysed by "
          f"{', '.join(sorted({c[1] for c in commits}))}. Every number on the test split of the run's seed (512 rows), "
          "at the last step; heads and offsets chosen on the validation rows.\n")
    keys = [k for k in settings(runs)]
    keys += [("headsize", L, 8) for L in sorted({k[1] for k in keys}) if ("width", L, 8) in keys]
    keys = sorted(set(keys), key=lambda k: (k[1], k[0] != "width", k[2]))

    def rows_of(table, k):
        return [r for r in table if in_arm(r, *k)]

    # Per setting: accuracy, plateau, who and what.
    print("| arm | layers | h | d_k | lr | n | test masked accuracy | on plateau | who: runs with a head | who: s / b | "
          "what: runs with a head | what: s / b |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    t1 = {rel: [] for rel in TESTED}
    for k in keys:
        rs = rows_of(runs, k)
        if not rs:
            continue
        acc = [float(r["test_acc"]) for r in rs]
        m_acc = stats.t_interval(acc) if len(acc) > 1 else (acc[0], math.nan, math.nan)
        flat = sum(r["plateau"] == "plateau" for r in rs)
        cells = [k[0], str(k[1]), str(k[2]), rs[0]["head_dim"], rs[0]["lr"], str(len(rs)),
                 f"{m_acc[0]:.3f}" + (f" [{m_acc[1]:.3f}, {m_acc[2]:.3f}]" if not math.isnan(m_acc[1]) else ""),
                 f"{flat}/{len(rs)}"]
        for rel in TESTED:
            rr = [r for r in rows_of(roles, k) if r["relation"] == rel]
            kk = sum(int(r["has_head"]) for r in rr)
            w = stats.wilson(kk, len(rr))
            s, b = mean([float(r["score"]) for r in rr]), mean([float(r["offset_share"]) for r in rr])
            cells += [f"{kk}/{len(rr)} [{w.low:.2f}, {w.high:.2f}]" if rr else "-", f"{fmt(s)} / {fmt(b)}"]
            margins = [float(r["margin"]) - MARGIN for r in rr if not math.isnan(float(r["margin"]))]
            _, n, p = stats.wilcoxon_signed_rank(margins, alternative="greater")
            t1[rel].append((k, p, len(margins)))
        print("| " + " | ".join(cells) + " |")
    print("\ns: the test score at the masked tokens of the head chosen on validation rows (mean over seeds); b: the "
          "test share of the fixed offset chosen on validation rows; a run has a head when s >= 0.5 and s - b >= 0.1 "
          "(Wilson 95% intervals). The fixed-head-size arm's h = 8 is the fixed-width model. On plateau: "
          "tools/experiments/plateau.py (gain < 1% over the last quarter of the stable phase, no rise).\n")
    for rel, label in ((WHO, "T1 who"), (WHAT, "T1 what")):
        tests = [(k, p, n) for k, p, n in t1[rel] if not math.isnan(p)]
        adj = stats.holm([p for _, p, _ in tests]) if tests else []
        ok = [f"{k[0]} L{k[1]} h{k[2]}" for (k, p, n), q in zip(tests, adj) if q < 0.05]
        print(f"- **{label}** ({rel}; d_R - 0.1 > 0, Wilcoxon signed-rank over the seeds, one-sided, Holm over "
              f"{len(tests)} settings): {'settings with a head: ' + ', '.join(ok) if ok else 'no setting has one'}. "
              "Holm p per setting: " + ", ".join(f"{k[0]} L{k[1]} h{k[2]} {q:.3g}" for (k, _, _), q in zip(tests, adj)) + ".")

    # T2: more heads, a larger margin, within (arm, layers).
    t2 = []
    for rel in TESTED:
        rr = [r for r in roles if r["relation"] == rel and not math.isnan(float(r["margin"]))]
        x = [int(r["heads"]) for r in rr]
        y = [float(r["margin"]) for r in rr]
        strata = [r["arm"] + r["layers"] for r in rr]
        if len(set(x)) > 1:
            rho, p = stats.spearman_test(x, y, alternative="greater", strata=strata)
            t2.append((rel, rho, p, len(x)))
    adj = stats.holm([p for *_, p, _ in t2]) if t2 else []
    for (rel, rho, p, n), q in zip(t2, adj):
        print(f"- **T2** ({rel}: more heads, a larger margin d_R; stratified by arm and layers): rho = {rho:.3f}, "
              f"one-sided permutation p = {p:.4f}, Holm over 2: {q:.4f} (n = {n} runs).")

    # T3: the R head's role-specific cost against a random head's.
    t3 = []
    by_run = defaultdict(list)
    for r in abl:
        by_run[(r["run"], r["arm"], r["layers"])].append(r)
    has = {(r["run"], r["arm"], r["layers"], r["relation"]): int(r["has_head"]) for r in roles}
    for only_labelled, label in ((True, "T3"), (False, "T3b")):
        diffs = []
        for rk, rows in by_run.items():
            for rel in TESTED:
                short = "who" if rel == WHO else "what"
                if only_labelled and not has.get(rk + (rel,), 0):
                    continue
                role = [r for r in rows if int(r[f"is_{short}_head"])]
                others = [float(r[f"specific_{short}"]) for r in rows if not int(r[f"is_{short}_head"])
                          and not math.isnan(float(r[f"specific_{short}"]))]
                if role and others and not math.isnan(float(role[0][f"specific_{short}"])):
                    diffs.append(float(role[0][f"specific_{short}"]) - sum(others) / len(others))
        w, n, p = stats.wilcoxon_signed_rank(diffs, alternative="greater")
        t3.append((label, diffs, w, n, p))
    adj = stats.holm([p if (lab == "T3b" or len(dd) >= 6) else math.nan for lab, dd, _, _, p in t3]) if t3 else []
    for (label, diffs, w, n, p), q in zip(t3, adj):
        what = "pairs whose run has the role head" if label == "T3" else "every (run, relation), the head chosen on validation"
        if label == "T3" and len(diffs) < 6:
            print(f"- **{label}** ({what}): {len(diffs)} pairs, fewer than 6: not testable.")
            continue
        m, lo, hi = stats.bootstrap_ci(diffs, n_boot=10000, seed=0)[:3] if diffs else (math.nan,) * 3
        print(f"- **{label}** ({what}): c_R(R head) - c_R(random head), nats per masked token, mean {m:+.4f} "
              f"[bootstrap 95% {lo:+.4f}, {hi:+.4f}] over {len(diffs)} pairs; Wilcoxon W+ = {w:.1f}, n = {n}, "
              f"one-sided p = {p:.4g}, Holm over 2: {q:.4g}.")

    # Described: the loss changes themselves, the other relations, the labels of every head.
    print("\nMean ablation, the loss change (nats per masked token) on the relation's tokens and on the other masked "
          "tokens, for the run's R head and for a random other head (mean over the runs):\n")
    print("| relation | runs | R head: R's tokens | R head: other tokens | random head: R's tokens | random head: other tokens |")
    print("|---|---|---|---|---|---|")
    for rel in TESTED:
        short = "who" if rel == WHO else "what"
        cells = [[], [], [], []]
        for rows in by_run.values():
            role = [r for r in rows if int(r[f"is_{short}_head"])]
            oth = [r for r in rows if not int(r[f"is_{short}_head"])]
            if not role or not oth:
                continue
            cells[0].append(float(role[0][f"loss_change_{short}_tokens"]))
            cells[1].append(float(role[0][f"loss_change_other_{short}"]))
            cells[2].append(mean([float(r[f"loss_change_{short}_tokens"]) for r in oth]))
            cells[3].append(mean([float(r[f"loss_change_other_{short}"]) for r in oth]))
        print(f"| {rel} | {len(cells[0])} | " + " | ".join(fmt(mean(c), "+.4f") for c in cells) + " |")
    # Described (added after the pilot, before any reported run): c_who and c_what contrast almost the
    # same tokens, since every verb with an object has a subject; the verbs with an object against
    # those without one tell a what head's cost from a verb head's.
    if abl and "what_vs_intransitive" in abl[0]:
        print("\nDescribed, not tested: the loss change on the masked verbs with an object minus that on the masked "
              "verbs without one (every verb has a subject, so c_who and c_what above contrast nearly the same "
              "tokens), per head kind (mean over the runs; the random head: the mean over the other ablated heads):\n")
        print("| head | runs | verbs with an object - verbs without | verbs without an object (tokens per run) |")
        print("|---|---|---|---|")
        for name, pick in (("what head", lambda r: int(r["is_what_head"])), ("who head", lambda r: int(r["is_who_head"])),
                           ("random head", lambda r: not int(r["is_what_head"]) and not int(r["is_who_head"]))):
            vals, toks = [], []
            for rows in by_run.values():
                sel = [float(r["what_vs_intransitive"]) for r in rows if pick(r)
                       and not math.isnan(float(r["what_vs_intransitive"]))]
                if sel:
                    vals.append(mean(sel))
                    toks.append(float(rows[0]["intransitive_tokens"]))
            print(f"| {name} | {len(vals)} | {fmt(mean(vals), '+.4f')} | {fmt(mean(toks), '.0f')} |")
    print("\nOther relations (described, not tested): s / b, mean over every run of a depth:\n")
    rels = sorted({r["relation"] for r in roles} - set(TESTED), key=lambda x: (x not in ARGUMENT, x))
    print("| layers | " + " | ".join(rels) + " |")
    print("|---" * (len(rels) + 1) + "|")
    for L in sorted({int(r["layers"]) for r in runs}):
        cells = []
        for rel in rels:
            rr = [r for r in roles if r["relation"] == rel and int(r["layers"]) == L]
            cells.append(f"{fmt(mean([float(r['score']) for r in rr]))} / {fmt(mean([float(r['offset_share']) for r in rr]))}")
        print(f"| {L} | " + " | ".join(cells) + " |")
    if (d / "heads.csv.gz").exists():
        heads = [r for r in read_csv(d / "heads.csv.gz") if (r["run"], r["arm"], str(r["layers"])) in done]
        print("\nEvery head's label (position or role), share of the heads of each setting:\n")
        print("| arm | layers | h | heads | positional | role | neither | the roles |")
        print("|---|---|---|---|---|---|---|---|")
        for k in keys:
            hs = rows_of(heads, k)
            if not hs:
                continue
            pos = sum(h["role_label"].startswith("positional") for h in hs)
            role = [h["role_label"][6:] for h in hs if h["role_label"].startswith("role: ")]
            counts = ", ".join(f"{rel} {role.count(rel)}" for rel in sorted(set(role)))
            print(f"| {k[0]} | {k[1]} | {k[2]} | {len(hs)} | {pos / len(hs):.2f} | {len(role) / len(hs):.2f} | "
                  f"{1 - (pos + len(role)) / len(hs):.2f} | {counts or '-'} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("analyse")
    s.add_argument("sweeps", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--qkv", default="build/qkv")
    s.add_argument("--train-qkv", help="the binary the runs were trained with (its name qkv-HASH gives the commit)")
    s.add_argument("--examples", type=int, default=512)
    s.add_argument("--draws", type=int, default=4)
    s.add_argument("--jobs", type=int, default=2)
    s = sub.add_parser("report")
    s.add_argument("dir")
    a = ap.parse_args()
    {"analyse": cmd_analyse, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
