#!/usr/bin/python3
"""Checks of tools/experiments: each statistic against values computed independently (textbook
values, hand-worked cases, brute-force enumeration), lr selection, and report.py end to end on a
synthetic sweep (table numbers parsed back, PNGs present and not blank); the reports of induction,
grokking and retrieval remade from the committed CSVs alone equal the committed results.md.

    /usr/bin/python3 tests/experiments/test_stats.py

Prints every failure and the number of checks; exit 0 when all passed (and there were some).
"""
import csv
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from experiments import select  # noqa: E402
from experiments import stats  # noqa: E402

REPORT = os.path.join(ROOT, "tools", "experiments", "report.py")
checks, failures = 0, []


def check(ok, what):
    global checks
    checks += 1
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def close(got, want, tol, what):
    check(got == want or abs(got - want) <= tol, f"{what}: got {got!r}, want {want!r} (tol {tol})")


def test_wilson():
    # Newcombe, Stat. Med. 17 (1998) 857-872, Table I, method 3 (score, no continuity correction).
    for k, n, low, high in [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
                            (1, 29, 0.0061, 0.1718)]:
        w = stats.wilson(k, n)
        close(w.low, low, 6e-5, f"wilson {k}/{n} low")
        close(w.high, high, 6e-5, f"wilson {k}/{n} high")
    # 0/10 and 10/10: the open end is z^2 / (n + z^2) (the closed end exactly 0 or 1); 5/10 by hand.
    z2 = 1.959963984540054 ** 2
    w = stats.wilson(0, 10)
    check(w.low == 0.0, "wilson 0/10 low is exactly 0")
    close(w.high, z2 / (10 + z2), 1e-12, "wilson 0/10 high")
    w = stats.wilson(10, 10)
    check(w.high == 1.0, "wilson 10/10 high is exactly 1")
    close(w.low, 10 / (10 + z2), 1e-12, "wilson 10/10 low")
    w = stats.wilson(5, 10)
    close(w.low, 0.236593, 1e-6, "wilson 5/10 low")
    close(w.high, 0.763407, 1e-6, "wilson 5/10 high")
    check(math.isnan(stats.wilson(0, 0).p), "wilson 0/0 is nan")
    check(all(0 <= stats.wilson(k, 3).low <= stats.wilson(k, 3).high <= 1 for k in range(4)), "wilson stays in [0, 1]")


def test_fisher():
    # Lady tasting tea: 3 of 4 cups right; P(x) = C(4,x)C(4,4-x)/70 = 1,16,36,16,1 over 70 -> p = 34/70.
    close(stats.fisher_exact(3, 1, 1, 3).p, 34 / 70, 1e-12, "fisher tea")
    # Wikipedia "Fisher's exact test" example (men/women studying): p = 0.002759.
    close(stats.fisher_exact(1, 9, 11, 3).p, 0.002759, 5e-7, "fisher 1,9,11,3")
    # Brute force over every table with the same margins, in floats.
    for a, b, c, d in [(3, 7, 10, 0), (2, 5, 6, 1), (0, 6, 6, 0), (4, 4, 4, 4)]:
        r1, c1, n = a + b, a + c, a + b + c + d
        prob = {x: math.comb(r1, x) * math.comb(n - r1, c1 - x) / math.comb(n, c1) for x in range(0, min(r1, c1) + 1)
                if 0 <= c1 - x <= n - r1}
        want = sum(p for p in prob.values() if p <= prob[a] * (1 + 1e-9))
        close(stats.fisher_exact(a, b, c, d).p, min(1, want), 1e-12, f"fisher {a},{b},{c},{d} vs enumeration")
    close(stats.fisher_exact(3, 7, 10, 0).p, 240 / 77520, 1e-12, "fisher 3/10 vs 10/10 by hand")
    close(stats.fisher_exact(3, 1, 1, 3).statistic, 9.0, 1e-12, "fisher odds ratio")


def test_mann_whitney():
    # SciPy's documented example (mannwhitneyu): U = 17, exact p = 1/9; asymptotic (continuity) 0.11134688653314041.
    males, females = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    t = stats.mann_whitney(males, females)
    check(t.method == "exact", "mann-whitney without ties is exact")
    close(t.statistic, 17, 0, "mann-whitney U")
    close(t.p, 1 / 9, 1e-12, "mann-whitney exact p")
    t = stats.mann_whitney(males, females, exact_max=0)
    check(t.method == "normal", "mann-whitney exact_max=0 uses the normal approximation")
    close(t.p, 0.11134688653314041, 1e-9, "mann-whitney normal p")
    # Exact p against enumerating all C(N, m) assignments of the ranks 1..N.
    for x, y in [([1.1, 2.5, 3.7], [4.2, 5.0, 6.3, 0.4]), ([5, 9, 2, 7], [1, 3, 4, 6, 8, 10]), ([1, 2, 3], [4, 5, 6])]:
        m, N = len(x), len(x) + len(y)
        pooled = sorted(x + y)
        u_obs = sum(pooled.index(v) + 1 for v in x) - m * (m + 1) / 2
        us = [sum(c) - m * (m + 1) / 2 for c in itertools.combinations(range(1, N + 1), m)]
        low, high = sum(u <= u_obs for u in us) / len(us), sum(u >= u_obs for u in us) / len(us)
        close(stats.mann_whitney(x, y).p, min(1, 2 * min(low, high)), 1e-12, f"mann-whitney {x} {y} vs enumeration")
    close(stats.mann_whitney([1, 2, 3], [4, 5, 6]).p, 0.1, 1e-12, "mann-whitney 3 vs 3 separated: 2/20")
    # Ties: normal with the permutation variance of the midrank sum, n_x n_y / (N (N-1)) sum (r - rbar)^2,
    # which is what the tie-corrected formula must equal.
    x, y = [1, 2, 2, 3, 5], [2, 3, 3, 4, 6, 6]
    r = stats.ranks(x + y)
    m, n, N = len(x), len(y), len(x) + len(y)
    var = m * n / (N * (N - 1)) * sum((v - r.mean()) ** 2 for v in r)
    u = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    z = (abs(u - m * n / 2) - 0.5) / math.sqrt(var)
    t = stats.mann_whitney(x, y)
    check(t.method == "normal", "mann-whitney with ties uses the normal approximation")
    close(t.statistic, u, 1e-12, "mann-whitney U with ties (pair count)")
    close(t.p, math.erfc(z / math.sqrt(2)), 1e-12, "mann-whitney tie-corrected p")
    check(stats.mann_whitney([1, 1], [1, 1, 1]).p == 1.0, "mann-whitney all tied: p = 1")
    check(list(stats.ranks([3, 1, 3, 2])) == [3.5, 1, 3.5, 2], "midranks")


def test_permutation():
    t = stats.permutation_test([1, 2, 3], [4, 5, 6])
    check(t.method == "exact", "permutation 3 vs 3 enumerates")
    close(t.statistic, -3, 1e-12, "permutation statistic")
    close(t.p, 0.1, 1e-12, "permutation 3 vs 3: 2 of 20 splits as extreme")
    x = [0.8, 1.9, 2.2, 3.1, 2.7, 1.4, 2.9, 3.5]
    y = [1.0, 0.3, 1.2, 2.0, 0.7, 1.6, 0.9, 1.1]
    pooled, total = x + y, sum(x + y)
    d = sum(x) / 8 - sum(y) / 8
    hits = sum(abs(2 * sum(pooled[i] for i in c) / 8 - total / 8) >= abs(d) - 1e-9 for c in itertools.combinations(range(16), 8))
    exact = hits / math.comb(16, 8)
    t1, t2 = stats.permutation_test(x, y, seed=1), stats.permutation_test(x, y, seed=1)
    check(t1.method == "random" and t1 == t2, "permutation 8 vs 8 is random and reproducible with a seed")
    close(t1.p, exact, 0.004, "permutation random p vs exact enumeration")
    check(stats.permutation_test(x, y, n_perm=20000).method == "exact", "permutation enumerates when C(N, m) <= n_perm")
    close(stats.permutation_test(x, y, n_perm=20000).p, exact, 1e-12, "permutation exact p vs enumeration")


def test_bootstrap_t():
    e = stats.bootstrap_ci([0, 1], "mean")
    check((e.low, e.high) == (0.0, 1.0), f"bootstrap mean of [0, 1]: means 0, 1/2, 1 w.p. 1/4, 1/2, 1/4 -> [0, 1]; got {e}")
    e = stats.bootstrap_ci([2.0] * 5, "median")
    check((e.value, e.low, e.high) == (2.0, 2.0, 2.0), "bootstrap of a constant")
    check(stats.bootstrap_ci([1, 5, 2, 8], seed=3) == stats.bootstrap_ci([1, 5, 2, 8], seed=3), "bootstrap seeded")
    check(math.isnan(stats.bootstrap_ci([1.0]).low), "bootstrap of one value: no interval")
    import numpy as np
    v = np.random.default_rng(7).normal(10, 2, 400)
    e = stats.bootstrap_ci(v, "mean")
    half = 1.959964 * v.std(ddof=1) / math.sqrt(len(v))
    close(e.high - e.low, 2 * half, 0.1 * 2 * half, "bootstrap mean CI ~ normal theory for n = 400")
    # Student t critical values (any table, e.g. Abramowitz & Stegun Table 26.10).
    for df, want in [(1, 12.706205), (2, 4.302653), (4, 2.776445), (10, 2.228139), (30, 2.042272)]:
        close(stats.t_quantile(df), want, 1e-5, f"t_0.975 df {df}")
    e = stats.t_interval([1, 2, 3])
    close(e.low, 2 - 4.302653 / math.sqrt(3), 1e-5, "t interval [1, 2, 3] low")
    close(e.high, 2 + 4.302653 / math.sqrt(3), 1e-5, "t interval [1, 2, 3] high")
    m = stats.median_iqr([1, 2, 3, 4, math.nan])
    check((m.median, m.q1, m.q3, m.n) == (2.5, 1.75, 3.25, 4), f"median/IQR of 1..4 (type 7): got {m}")


def test_welch():
    # R: t.test(c(1,2,3), c(4,5,6)): t = -3.6742, df = 4, p-value = 0.02131.
    t = stats.welch_t([1, 2, 3], [4, 5, 6])
    close(t.statistic, -3.674235, 1e-6, "welch t")
    close(t.p, 0.02131, 5e-5, "welch p, df 4")
    # Unequal variances by hand: x = [1, 2, 3, 4] (s^2 = 5/3), y = [2, 8, 14] (s^2 = 36):
    # se^2 = 5/12 + 12, t = -5.5 / sqrt(12.41667), df = 12.41667^2 / ((5/12)^2/3 + 144/2) = 2.14 -> 2.
    t = stats.welch_t([1, 2, 3, 4], [2, 8, 14])
    tt = -5.5 / math.sqrt(5 / 12 + 12)
    close(t.statistic, tt, 1e-12, "welch t, unequal variances")
    check(t.method == "welch df=2.1", f"welch df: {t.method}")
    # df 2: P(|T| <= t) = t / sqrt(2 + t^2) in closed form.
    close(t.p, 1 - abs(tt) / math.sqrt(2 + tt * tt), 1e-12, "welch p, df 2 closed form")
    # R: t.test(c(1,2,3), c(4,5,6))$conf.int = (-5.266958, -0.733042), df 4.
    e = stats.welch_interval([1, 2, 3], [4, 5, 6])
    close(e.value, -3.0, 1e-12, "welch interval: the difference")
    close(e.low, -5.266958, 1e-5, "welch interval low, df 4")
    close(e.high, -0.733042, 1e-5, "welch interval high, df 4")
    # df 2 (floored from 2.14): t_{0.975, 2} = 4.302653.
    e = stats.welch_interval([1, 2, 3, 4], [2, 8, 14])
    close(e.high - e.value, 4.302653 * math.sqrt(5 / 12 + 12), 1e-5, "welch interval half-width, df 2")
    check(math.isnan(stats.welch_interval([1], [2, 3]).low), "welch interval of one value: no interval")


def test_holm():
    # sorted 0.005 0.01 0.03 0.04 -> x4 0.02, x3 0.03, x2 0.06, x1 0.04 -> running max 0.06.
    got = stats.holm([0.01, 0.04, 0.03, 0.005])
    for g, w in zip(got, [0.03, 0.06, 0.06, 0.02]):
        close(g, w, 1e-12, "holm [0.01, 0.04, 0.03, 0.005]")
    got = stats.holm([0.5, math.nan, 0.2])
    check(math.isnan(got[1]) and abs(got[0] - 0.5) < 1e-12 and abs(got[2] - 0.4) < 1e-12, f"holm with nan: {got}")
    check(stats.holm([0.6, 0.7]) == [1.0, 1.0], "holm caps at 1")


def test_kaplan_meier():
    # Hand-worked: reached at 100, 200, 300, 500; censored at 200 and 400.
    # t=100: 6 at risk, 1 reaches: S = 5/6; t=200: 5 at risk, 1 reaches (before the censoring): S = 2/3;
    # t=300: 3 at risk: S = 4/9; t=500: 1 at risk: S = 0. Greenwood at 300: 1/30 + 1/20 + 1/6 = 1/4.
    times = [100, 200, 200, 300, 400, 500]
    reached = [True, True, False, True, False, True]
    km = {s.t: s for s in stats.kaplan_meier(times, reached)}
    for t, want in [(100, 5 / 6), (200, 2 / 3), (300, 4 / 9), (400, 4 / 9), (500, 0.0)]:
        close(km[t].surv, want, 1e-12, f"KM S({t})")
    check((km[200].at_risk, km[200].events, km[200].censored) == (5, 1, 1), "KM risk set at 200")
    close(km[300].greenwood, 0.25, 1e-12, "KM Greenwood sum at 300")
    f = stats.fraction_reached(times, reached, 300)
    close(f.fraction, 5 / 9, 1e-12, "fraction reached by 300")
    check(f.method == "greenwood-loglog" and 0 <= f.low < 5 / 9 < f.high <= 1, f"censored CI inside [0, 1]: {f}")
    se = math.sqrt(0.25) / abs(math.log(4 / 9))
    close(f.low, 1 - (4 / 9) ** math.exp(-1.959964 * se), 1e-6, "log-log CI low")
    f = stats.fraction_reached(times, reached, 150)
    check(f.method == "wilson" and abs(f.fraction - 1 / 6) < 1e-12, "no censoring before 150: 1/6 with Wilson")
    med = stats.censored_median(times, reached)
    check(med.reached and med.value == 300, f"censored median = 300 (first S <= 1/2): {med}")
    med = stats.censored_median([400, 1000, 1000, 1000], [True, False, False, False])
    check(not med.reached and med.value == 1000, f"median not reached: > 1000: {med}")
    # No censoring: KM is the empirical fraction.
    f = stats.fraction_reached([300, 400, 1000, 1000], [True, True, False, False], 1000)
    close(f.fraction, 0.5, 1e-12, "uncensored KM = k/n")


def test_select():
    rows = []
    for h, lr, losses in [(1, "0.0003", [1.0, 1.2]), (1, "0.001", [0.5, 0.7]), (1, "0.003", [0.4, "nan"]),
                          (2, "0.0003", [0.9, 0.9]), (2, "0.001", [0.3, 0.5]), (2, "0.003", [0.4, 0.4])]:
        for seed, v in enumerate(losses, 1):
            rows.append({"model.heads": str(h), "lr": lr, "seed": str(seed), "val_loss": str(v)})
    choices, kept = select.select_lr(rows, ["model.heads", "lr"], "val_loss", "min", "lr")
    check(choices[("1",)].lr == "0.001", "select: a diverged seed (nan) makes its lr lose")
    check(choices[("2",)].lr == "0.001", "select: tie (0.4 == 0.4) goes to the lower lr")
    check(len(kept) == 4 and {r["lr"] for r in kept} == {"0.001"}, "select keeps the chosen lr's runs")
    check([c.lr for c in choices[("2",)].candidates] == ["0.0003", "0.001", "0.003"], "select lists candidates in lr order")
    choices, _ = select.select_lr(rows, ["model.heads"], "val_loss", "max", "lr")
    check(choices[("2",)].lr == "0.0003", "select max")
    choices, kept = select.select_lr([{"a": "1", "val_loss": "1"}], ["a"], "val_loss", "min", None)
    check(choices[("1",)].lr is None and len(kept) == 1, "select without an lr column keeps everything")
    # Seeds added at one lr only: the choice is made on the seeds both lrs ran (1, 2), and the
    # chosen lr keeps all its runs. Over all its seeds 0.001 would lose (mean 0.4 against 0.3).
    rows = [{"h": "1", "lr": "0.001", "seed": str(s), "val_acc": v} for s, v in [(1, "0.9"), (2, "0.9"), (3, "0"), (4, "0")]]
    rows += [{"h": "1", "lr": "0.003", "seed": str(s), "val_acc": v} for s, v in [(1, "0.8"), (2, "0.8"), (5, "0.9")]]
    choices, kept = select.select_lr(rows, ["h"], "val_acc", "max", "lr")
    ch = choices[("1",)]
    check(ch.lr == "0.001" and [c.n for c in ch.candidates] == [2, 2], f"select on the common seeds: {ch}")
    check(len(kept) == 4, "select keeps every run of the chosen lr, tuning seeds or not")
    # The lr grid extended beyond an edge: the next half-decade (1, 3 x 10^k) up or down.
    from experiments.roles import half_decade
    got = [f"{half_decade(lr, up):g}" for lr, up in [(0.03, True), (0.001, False), (0.003, True), (0.01, False), (1e-4, False)]]
    check(got == ["0.1", "0.0003", "0.01", "0.003", "3e-05"], f"half_decade: {got}")


# ---- end to end ----------------------------------------------------------------------------------

def write_csv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def synth_sweep(d):
    """heads 1, 4, 8 x lr 3e-4, 1e-3, 3e-3 x seeds 1-10; the lr to choose by val_loss is 1e-3 for
    h = 1, 3e-3 for h = 4, and 1e-3 for h = 8 (a tie with 3e-3). Under the chosen lr: h = 1 solves
    3 of 10 (steps 400, 500, 600), h = 4 10 of 10 (steps 200 + 50 seed), h = 8 9 of 10."""
    header = ["run", "model.heads", "seed", "status", "steps", "val_loss", "test_loss", "test_token_acc",
              "steps_to_target", "wall_s", "lr", "cpu", "blas"]
    best = {1: "0.001", 4: "0.003", 8: "0.001"}
    rows = []
    for h in (1, 4, 8):
        for lr in ("0.0003", "0.001", "0.003"):
            for seed in range(1, 11):
                chosen = lr == best[h]
                val = 0.5 if chosen or (h == 8 and lr == "0.003") else 0.9
                solved = chosen and (h == 4 or (h == 1 and seed <= 3) or (h == 8 and seed <= 9))
                stt = {1: 300 + 100 * seed, 4: 200 + 50 * seed, 8: 300}[h] if solved else -1
                status = "target" if solved else "steps"
                test_loss = 0.01 * seed + 0.001 * h + (0 if solved else 1)
                run = f"heads={h}_lr={lr}_seed={seed}"
                rows.append([run, h, seed, status, stt if solved else 1000, val, test_loss,
                             0.995 if solved else 0.45, stt, 10, lr, "Xeon", "openblas"])
                steps = list(range(50, (stt if solved else 1000) + 1, 50))
                write_csv(os.path.join(d, "runs", run, "metrics.csv"), ["step", "val_loss", "val_token_acc"],
                          [[s, 2.0 * math.exp(-s / (100.0 * h)) + 0.02 * seed, min(1, s / 1000 + 0.01 * seed)] for s in steps])
    rows.append(["heads=4_lr=0.003_seed=11", 4, 11, "failed"] + ["nan"] * 6 + ["0.003", "", ""])
    write_csv(os.path.join(d, "results.csv"), header, rows)
    return os.path.join(d, "results.csv")


def run(*args):
    p = subprocess.run([sys.executable, REPORT, *args], capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"report.py {' '.join(args[:1])} exit 0 (stderr: {p.stderr.strip()[-400:]})")
    return p.stdout


def numbers(cell):
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", cell)]


def table_rows(text):
    """Markdown table rows (first table in text) as lists of cells, header first."""
    lines = [l for l in text.split("\n\n")[0].splitlines() if l.startswith("|") and not l.startswith("|---")]
    return [[c.strip() for c in l.strip("|").split("|")] for l in lines]


def png_ok(path, what):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    check(os.path.exists(path) and os.path.getsize(path) > 5000, f"{what}: {path} exists and is > 5 kB")
    if os.path.exists(path):
        img = mpimg.imread(path)
        check(img.shape[0] > 100 and img.shape[1] > 100 and float(img[..., :3].var()) > 1e-3, f"{what}: PNG is not blank")


def test_spearman():
    # Perfect rank agreement and reversal; a hand-worked case with a tie.
    check(abs(stats.spearman([1, 2, 3, 4], [10, 20, 30, 40]) - 1) < 1e-12, "spearman of a monotone pair is 1")
    check(abs(stats.spearman([1, 2, 3, 4], [4, 3, 2, 1]) + 1) < 1e-12, "spearman of a reversed pair is -1")
    # x = 1..5, y = 2 1 4 3 5: sum of squared rank differences 4, rho = 1 - 6*4/(5*24) = 0.8
    check(abs(stats.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) - 0.8) < 1e-12, "spearman textbook value 0.8")
    # The permutation p against the exact enumeration of all 5! orders.
    rho = 0.8
    exact = sum(stats.spearman([1, 2, 3, 4, 5], list(p)) >= rho - 1e-12 for p in itertools.permutations([1, 2, 3, 4, 5])) / 120
    r, p = stats.spearman_test([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], n_perm=20000, seed=1)
    check(abs(r - 0.8) < 1e-12 and abs(p - exact) < 0.01, f"spearman permutation p {p:.4f} near the exact {exact:.4f}")
    r, p = stats.spearman_test([1, 2, 3, 4, 5], [5, 4, 3, 2, 1], n_perm=2000, seed=1)
    check(p > 0.99, f"a falling trend is no evidence of a rising one (p {p:.3f})")


def test_spearman_strata():
    # Stratified: the statistic is the size-weighted mean of the within-stratum rhos, permuted within
    # strata; against the exact enumeration of all 4! x 3! within-stratum orders.
    x = [1, 2, 3, 4, 1, 2, 3]
    y = [0.2, 0.1, 0.5, 0.9, 3.0, 5.0, 4.0]
    st = ["a"] * 4 + ["b"] * 3
    want = (4 * stats.spearman(x[:4], y[:4]) + 3 * stats.spearman(x[4:], y[4:])) / 7
    stat = lambda ya, yb: (4 * stats.spearman(x[:4], ya) + 3 * stats.spearman(x[4:], yb)) / 7  # noqa: E731
    exact = sum(stat(list(pa), list(pb)) >= want - 1e-12
                for pa in itertools.permutations(y[:4]) for pb in itertools.permutations(y[4:])) / 144
    r, p = stats.spearman_test(x, y, n_perm=20000, seed=3, strata=st)
    check(abs(r - want) < 1e-12, f"stratified rho = weighted mean of within-stratum rhos ({r} vs {want})")
    check(abs(p - exact) < 0.01, f"stratified permutation p {p:.4f} near the exact {exact:.4f}")
    # Levels that differ between strata are no trend within them: pooled rho is high, stratified 0.
    x2, y2 = [1, 1, 2, 2, 3, 3, 4, 4], [1, 2, 2, 1, 10, 11, 11, 10]
    r, p = stats.spearman_test(x2, y2, n_perm=2000, seed=1, strata=[0, 0, 0, 0, 1, 1, 1, 1])
    check(stats.spearman(x2, y2) > 0.7 and abs(r) < 1e-12 and p > 0.4,
          f"strata absorb level differences: pooled {stats.spearman(x2, y2):.2f}, stratified {r:.2f} (p {p:.2f})")
    # One stratum for everything is the unstratified test, to the bit.
    check(stats.spearman_test(x, y, n_perm=500, seed=2) == stats.spearman_test(x, y, n_perm=500, seed=2, strata=[7] * 7),
          "a single stratum gives the unstratified test")
    # A stratum with a constant y has no rho and no weight.
    r, _ = stats.spearman_test([1, 2, 3, 1, 2, 3], [1, 2, 3, 5, 5, 5], n_perm=100, strata=[0, 0, 0, 1, 1, 1])
    check(abs(r - 1) < 1e-12, f"a constant stratum has weight 0: rho {r}")


def test_wilcoxon():
    # All 6 differences positive: W+ = 21, p = 1/64 exactly (one sign pattern of 64).
    w, n, p = stats.wilcoxon_signed_rank([1, 2, 3, 4, 5, 6])
    check(w == 21 and n == 6 and abs(p - 1 / 64) < 1e-12, f"wilcoxon all positive: W+ {w}, p {p}")
    # Brute force over sign patterns for a case with ties and a zero (dropped).
    d = [0.5, -1.0, 1.0, 2.0, -0.25, 3.0, 0.0]
    w, n, p = stats.wilcoxon_signed_rank(d)
    nz = [v for v in d if v != 0]
    r = stats.ranks([abs(v) for v in nz])
    brute = 0
    for signs in itertools.product([1, -1], repeat=len(nz)):
        brute += sum(rk for rk, s in zip(r, signs) if s > 0) >= w - 1e-9
    check(n == 6 and abs(p - brute / 2 ** len(nz)) < 1e-12, f"wilcoxon exact p {p} equals brute force {brute / 64}")
    # Large n: the normal approximation agrees with the exact tail within 0.01.
    d = [((-1) ** k) * (k + 1) + 3 for k in range(20)]
    _, _, exact = stats.wilcoxon_signed_rank(d)
    big = d + [v + 100 for v in d[:5]]
    _, _, approx = stats.wilcoxon_signed_rank(big)
    check(0 <= exact <= 1 and 0 <= approx <= 1, "wilcoxon p in [0, 1] (exact and normal)")


def test_lr_estimates():
    """Cross-fitting and held-out seeds (select.py, report.py --lr-estimate) on a hand-made grid where
    the two halves of the seeds prefer different lrs."""
    rows = []
    for lr, vals in (("0.001", {1: 0.1, 2: 0.9, 3: 0.1, 4: 0.9}), ("0.003", {1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5})):
        for seed, v in vals.items():
            rows.append({"h": "1", "lr": lr, "seed": str(seed), "val_loss": str(v)})
    folds, kept = select.select_lr_crossfit(rows, ["h"], "val_loss", "min", "lr")
    first, second = folds[("1",)]
    # Seeds 1, 3 are reported at the lr chosen on seeds 2, 4 (0.003: 0.5 < 0.9), seeds 2, 4 at the lr
    # chosen on 1, 3 (0.001: 0.1 < 0.5).
    check((first.lr, second.lr) == ("0.003", "0.001"), f"cross-fit: each half at the other half's choice ({first.lr}, {second.lr})")
    check(sorted((r["seed"], r["lr"]) for r in kept) == [("1", "0.003"), ("2", "0.001"), ("3", "0.003"), ("4", "0.001")],
          f"cross-fit keeps one run per seed, at its half's lr: {[(r['seed'], r['lr']) for r in kept]}")
    extra = rows + [{"h": "1", "lr": "0.001", "seed": s, "val_loss": "0.2"} for s in ("5", "6")]
    check(select.tuning_seeds(extra, ["h"], "lr") == {("1",): {"1", "2", "3", "4"}}, "tuning seeds: those every lr ran")
    # Seeds 5, 6 ran at 0.001 only: they chose nothing, and are reported at the choice made on all the
    # tuning seeds (a tie over seeds 1-4, 0.5 each: the lower lr, 0.001); seeds 1-4 as before.
    _, kept = select.select_lr_crossfit(extra, ["h"], "val_loss", "min", "lr")
    check(sorted((r["seed"], r["lr"]) for r in kept) ==
          [("1", "0.003"), ("2", "0.001"), ("3", "0.003"), ("4", "0.001"), ("5", "0.001"), ("6", "0.001")],
          f"cross-fit with extra seeds: {[(r['seed'], r['lr']) for r in kept]}")
    try:
        select.select_lr_crossfit(rows[:1] + rows[4:5], ["h"], "val_loss", "min", "lr")
        check(False, "cross-fit with one tuning seed must fail")
    except ValueError as e:
        check("2 or more" in str(e), f"cross-fit error names the cause: {e}")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "r.csv")
        write_csv(path, ["run", "h", "seed", "status", "steps", "lr", "val_loss", "test_acc"],
                  [[f"r{r['lr']}_{r['seed']}", r["h"], r["seed"], "steps", 100, r["lr"], r["val_loss"],
                    "1.0" if r["seed"] in ("5", "6") else "0.0"] for r in extra])
        # Held out: the tie over seeds 1-4 (mean 0.5 each) goes to 0.001, and only seeds 5, 6 are reported.
        text = run("table", path, "--select-lr", "val_loss:min", "--lr-estimate", "held-out", "--metric", "test_acc:success>=0.5")
        body = table_rows(text)[1]
        check(body[1] == "2" and body[2] == "0.001" and numbers(body[3])[:2] == [2, 2],
              f"--lr-estimate held-out: seeds 5 and 6 only, 2/2: {body}")
        check("took no part in the choice" in text, "held-out caption")
        write_csv(path, ["run", "h", "seed", "status", "steps", "lr", "val_loss", "test_acc"],
                  [[f"r{r['lr']}_{r['seed']}", r["h"], r["seed"], "steps", 100, r["lr"], r["val_loss"],
                    "1.0" if r["lr"] == "0.003" else "0.0"] for r in rows])
        text = run("table", path, "--select-lr", "val_loss:min", "--lr-estimate", "cross-fit", "--metric", "test_acc:success>=0.5")
        body = table_rows(text)[1]
        check(body[2] == "0.003 / 0.001" and numbers(body[3])[:2] == [2, 4], f"--lr-estimate cross-fit: {body}")
        text = run("table", path, "--select-lr", "val_loss:min", "--metric", "test_acc:success>=0.5")
        check("winner's curse" in text, "the default caption names the winner's curse")


def test_end_to_end():
    with tempfile.TemporaryDirectory() as d:
        results = synth_sweep(os.path.join(d, "sweep"))
        out = os.path.join(d, "table.md")
        run("table", results, "--group", "model.heads", "--select-lr", "val_loss:min",
            "--metric", "test_token_acc:success>=0.99", "--metric", "test_loss:mean", "--metric", "steps_to_target:time",
            "--compare", "4", "--title", "synthetic", "--out", out)
        text = open(out).read()
        rows = table_rows(text)
        check(rows[0][:3] == ["heads", "n", "lr"] and len(rows) == 4, f"table header and 3 settings: {rows[:1]}")
        body = {r[0]: r for r in rows[1:]}
        check(body["1"][2] == "0.001" and body["4"][2] == "0.003" and body["8"][2] == "0.001",
              f"chosen lr per setting (h = 8: tie -> lower): {[body[h][2] for h in ('1', '4', '8')]}")
        check(body["4"][1] == "10 (1 not finished)" and body["1"][1] == "10", f"n column: {body['4'][1]}, {body['1'][1]}")
        k, n, p, lo, hi = numbers(body["1"][3])
        w = stats.wilson(3, 10)
        check((k, n) == (3, 10) and abs(p - 0.3) < 1e-9 and abs(lo - w.low) < 6e-4 and abs(hi - w.high) < 6e-4,
              f"h = 1 success cell {body['1'][3]}")
        check(numbers(body["4"][3])[:2] == [10, 10] and numbers(body["4"][3])[4] == 1.0, f"h = 4 success 10/10, upper 1: {body['4'][3]}")
        m, lo, hi = numbers(body["4"][4])
        e = stats.t_interval([0.01 * s + 0.004 for s in range(1, 11)])
        check(abs(m - 0.059) < 1e-4 and abs(lo - e.low) < 1e-4 and abs(hi - e.high) < 1e-4, f"h = 4 mean test_loss {body['4'][4]}")
        check(numbers(body["1"][5])[0] == 0.3 and body["1"][6] == "> 1000", f"h = 1 KM: 0.3 by 1000, median > 1000: {body['1'][5:]}")
        # h = 4 reaches at 250, 300, ..., 700: KM median = the 5th time (S = 1/2 exactly) = 450.
        check(body["4"][6] == "450" and body["8"][6] == "300", f"KM medians: {body['4'][6]}, {body['8'][6]}")
        check("Xeon (30 runs)" in text and "openblas" in text, "caption names the CPU and BLAS")
        check("among 0.0003, 0.001, 0.003" in text, "caption lists the lr candidates")
        comp = [l for l in text.splitlines() if l.startswith("| heads=")]
        check(len(comp) == 6, f"comparisons: 2 settings x 3 metrics = 6 rows, got {len(comp)}")
        check("6 comparisons (2 settings x 3 metrics)" in text, "caption states the number of comparisons")
        fisher = [l for l in comp if l.startswith("| heads=1 | heads=4 | test_token_acc")][0].split("|")
        p_raw, p_holm = float(fisher[7]), float(fisher[8])
        close(p_raw, 240 / 77520, 1e-5, "h = 1 vs h = 4 Fisher p in the table")
        raw = [float(l.split("|")[7]) for l in comp]
        close(p_holm, stats.holm(raw)[[l.startswith("| heads=1 | heads=4 | test_token_acc") for l in comp].index(True)], 1e-5,
              "Holm p in the table")
        check("Mann-Whitney exact" in text, "test method named per row")
        text = run("table", results, "--select-lr", "val_loss:min", "--metric", "test_loss:mean", "--compare", "4",
                   "--test", "welch")
        check(text.count("Welch t df=") == 2 and "2 comparisons (2 settings x 1 metric)" in text, "--test welch")

        # The same table to stdout, without lr selection: all 30 runs per setting pooled.
        text = run("table", results, "--metric", "test_token_acc:success>=0.99", "--where", "model.heads=1|4")
        body = {r[0]: r for r in table_rows(text)[1:]}
        check(set(body) == {"1", "4"} and body["1"][1] == "30", f"--where and no selection: {list(body)}")

        # --compare naming one key of two: each d_k's unscaled arm against its scaled arm.
        rows = [[f"r{dk}_{sc}_{seed}", dk, sc, seed, "steps", 1000, 0.995 if seed <= (10 if sc == 0 else 2 + dk // 64) else 0.4]
                for dk in (16, 64) for sc in (0, 1) for seed in range(1, 11)]
        two = os.path.join(d, "two.csv")
        write_csv(two, ["run", "model.head_dim", "model.scale", "seed", "status", "steps", "test_token_acc"], rows)
        text = run("table", two, "--metric", "test_token_acc:success>=0.99", "--compare", "model.scale=0")
        comp = [l.split("|") for l in text.splitlines() if l.startswith("| head_dim=")]
        check([c[2].strip() for c in comp] == ["head_dim=16, scale=0", "head_dim=64, scale=0"], f"stratified baselines: {comp}")
        close(float(comp[0][7]), stats.fisher_exact(2, 8, 10, 0).p, 1e-5, "d_k 16: 2/10 unscaled vs 10/10 scaled")
        check("2 comparisons (2 settings x 1 metric)" in text, "stratified comparisons counted")

        # trend: heads against success at the chosen lr (h = 1: 3/10, 4: 10/10, 8: 9/10).
        text = run("trend", results, "--x", "model.heads", "--select-lr", "val_loss:min", "--metric",
                   "test_token_acc:success>=0.99", "--alternative", "greater", "--stated", "post-hoc", "--n-perm", "2000")
        row = table_rows(text)[1]
        xs = [1] * 10 + [4] * 10 + [8] * 10
        ys = [1] * 3 + [0] * 7 + [1] * 10 + [1] * 9 + [0]
        rho, p = stats.spearman_test(xs, ys, n_perm=2000, alternative="greater")
        check(row[1] == "1: 3/10, 4: 10/10, 8: 9/10" and row[2] == "30" and abs(float(row[3]) - rho) < 6e-4,
              f"trend row: per-x counts, n, rho {rho:.3f}: {row}")
        close(float(row[4]), p, 1e-3, "trend p = spearman_test's")
        check("Post hoc" in text and "1 test of this table" in text, "trend caption: post hoc, one test")
        p_bad = subprocess.run([sys.executable, REPORT, "trend", results, "--x", "model.heads", "--metric", "test_loss",
                                "--alternative", "greater"], capture_output=True, text=True)
        check(p_bad.returncode != 0 and "--stated" in p_bad.stderr, "trend requires --stated before|post-hoc")
        # --derive: a column from two others, usable as a setting key.
        text = run("table", results, "--derive", "twice=model.heads+model.heads", "--group", "twice",
                   "--metric", "test_loss:mean")
        check([r[0] for r in table_rows(text)[1:]] == ["2", "8", "16"], f"--derive as a group key: {table_rows(text)}")

        png = os.path.join(d, "curves.png")
        cap = run("plot-curves", os.path.join(d, "sweep"), "--metric", "val_loss", "--by", "model.heads",
                  "--select-lr", "val_loss:min", "--label", "model.heads=1:one head", "--out", png)
        png_ok(png, "plot-curves")
        check("one head" in cap and "median" in cap and "30 runs" in cap, f"plot-curves caption: {cap.strip()[:200]}")
        png = os.path.join(d, "rate.png")
        cap = run("plot-rate", results, "--x", "model.heads", "--metric", "test_token_acc:success>=0.99",
                  "--select-lr", "val_loss:min", "--logx", "--out", png)
        png_ok(png, "plot-rate")
        check("3/10" in cap and "Wilson" in cap, f"plot-rate caption: {cap.strip()[:200]}")
        png = os.path.join(d, "rate2.png")
        cap = run("plot-rate", results, "--x", "model.heads", "--metric", "test_token_acc:success>=0.99",
                  "--metric", "test_token_acc:success>=0.4", "--select-lr", "val_loss:min", "--out", png,
                  "--title", "a title long enough to be clipped at the edge of a figure if it were not wrapped onto lines")
        png_ok(png, "plot-rate, two panels")
        check("one panel each" in cap and "panel test_token_acc >= 0.4: " in cap and "10/10" in cap,
              f"plot-rate two metrics caption: {cap.strip()[:300]}")

        rows = []
        for layer in ("blocks.0.attn", "blocks.1.attn"):
            for h in range(2):
                for i in range(5):
                    w = [math.exp(-abs(i - j) * (h + 1)) for j in range(5)]
                    rows += [[layer, h, i, j, 10 + i, 10 + j, w[j] / sum(w)] for j in range(5)]
        attn = os.path.join(d, "attention.csv")
        write_csv(attn, ["layer", "head", "query", "key", "query_token", "key_token", "weight"], rows)
        png = os.path.join(d, "heat.png")
        cap = run("heatmap", attn, "--layer", "blocks.0.attn", "--value-offset", "12", "--out", png)
        png_ok(png, "heatmap")
        check("colour bar" in cap and "blocks.0.attn" in cap, "heatmap caption")

        p = subprocess.run([sys.executable, REPORT, "table", results, "--metric", "test_loss:average"],
                           capture_output=True, text=True)
        check(p.returncode != 0 and "expected NAME:mean" in p.stderr, "a bad --metric is an error naming the forms")


def test_committed_reports():
    """The reports whose tables come from per-run CSVs by a script of their own are what that script
    makes from the committed CSVs alone (the path `run.sh --report-only` takes without sweeps)."""
    import shutil
    exp = os.path.join(ROOT, "experiments")
    S = os.path.join(ROOT, "tools", "experiments")
    with tempfile.TemporaryDirectory() as d:
        missing = os.path.join(d, "no-sweep")
        cases = []
        out = os.path.join(d, "induction")
        shutil.copytree(os.path.join(exp, "induction"), out)
        cases.append(("induction", [os.path.join(S, "induction.py"), missing, os.path.join(out, "runs.csv"),
                                    os.path.join(out, "heads.csv"), out]))
        out = os.path.join(d, "grokking")
        shutil.copytree(os.path.join(exp, "grokking"), out)
        cases.append(("grokking", [os.path.join(S, "grokking.py"), os.path.join(out, "runs.csv"), missing,
                                   "--out", os.path.join(out, "grokking.png"), "--steps", os.path.join(out, "steps.csv")]))
        out = os.path.join(d, "retrieval")
        shutil.copytree(os.path.join(exp, "retrieval"), out)
        cases.append(("retrieval", [os.path.join(S, "retrieval.py"), missing, out]))
        for name, cmd in cases:
            p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=120)
            want = open(os.path.join(exp, name, "results.md")).read()
            check(p.returncode == 0 and p.stdout == want,
                  f"{name}: the committed results.md is what its script makes from the committed CSVs "
                  f"(exit {p.returncode}; {p.stderr.strip()[-200:]})")


def test_report_only_keeps():
    """`run.sh --report-only` on a checkout without sweeps: the experiments whose reports need the runs'
    own files keep their committed lr.txt and results.md byte for byte, and exit 0; scale_dv's tables are
    remade from its committed CSVs, or kept when there are none."""
    import shutil
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(os.path.join(ROOT, "tools"), os.path.join(d, "tools"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        names = ["roles", "lm_heads", "lm_dk", "scale_dv", "lm_heads_zh", "lm_dk_zh"]
        for n in names:
            shutil.copytree(os.path.join(ROOT, "experiments", n), os.path.join(d, "experiments", n))
        def snapshot():
            out = {}
            for n in names:
                for f in ("lr.txt", "results.md", "lr_scaled.txt", "lr_unscaled.txt"):
                    path = os.path.join(d, "experiments", n, f)
                    if os.path.exists(path):
                        out[(n, f)] = open(path, "rb").read()
            return out
        before = snapshot()
        has_csv = os.path.exists(os.path.join(d, "experiments", "scale_dv", "scaled.csv"))
        p = subprocess.run(["bash", os.path.join(d, "tools", "experiments", "run.sh"), "--report-only", *names],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, f"run.sh --report-only without sweeps exits 0 (exit {p.returncode}: {p.stderr[-300:]})")
        after = snapshot()
        for key, old in before.items():
            if key == ("scale_dv", "results.md") and has_csv:
                continue  # remade from the committed CSVs
            check(after.get(key) == old, f"{key[0]}/{key[1]} is kept byte for byte by --report-only without sweeps")
        check("roles/results.md kept" in p.stderr and "lm_heads/results.md kept" in p.stderr,
              "run.sh says which reports it kept")


def test_roles_v2():
    """roles_v2.py: remask masks as the task does (max(1, round(0.15 n)) of a row's n sentence tokens,
    nothing else touched), and the report on a synthetic analysis: T1 finds the what head and no who
    head, T3 is testable with 6 pairs, and the described table of verbs with an object against verbs
    without one gives each head kind's mean."""
    import gzip
    import numpy as np
    from experiments import roles_v2
    words = np.full((3, 32), -1)
    words[0, :20], words[1, :5], words[2, :32] = 1, 1, 1
    orig = np.arange(96).reshape(3, 32) % 50
    batch = roles_v2.remask({"inputs": orig, "targets": np.full((3, 32), -100), "words": words}, [1, 0], 60)
    again = roles_v2.remask({"inputs": orig, "targets": np.full((3, 32), -100), "words": words}, [1, 0], 60)
    check((batch["inputs"] == again["inputs"]).all() and (batch["targets"] == again["targets"]).all(),
          "roles_v2.remask: the same draw seed, the same masks")
    chosen = batch["targets"] >= 0
    check([int(c) for c in chosen.sum(axis=1)] == [3, 1, 5], f"roles_v2.remask: max(1, round(0.15 n)) per row: "
          f"{chosen.sum(axis=1).tolist()}")
    check(not (chosen & (words < 0)).any(), "roles_v2.remask: only sentence tokens are chosen")
    check(((batch["inputs"] != orig) <= chosen).all(), "roles_v2.remask: inputs change only at the chosen positions")
    check((batch["targets"][chosen] == orig[chosen]).all(), "roles_v2.remask: the targets are the original tokens")
    with tempfile.TemporaryDirectory() as d:
        common = {"arm": "width", "layers": 2, "heads": 4, "head_dim": 16, "lr": 0.01}
        runs, roles, abl = [], [], []
        for s in range(1, 7):
            run = f"heads=4_seed={s}"
            runs.append({"run": run, **common, "seed": s, "test_acc": 0.5 + s / 100, "plateau": "improving",
                         "cpu": "GenuineIntel family 6 model 167", "train_commit": "aaaaaaa", "analysis_commit": "bbbbbbb"})
            for rel, score, base in (("verb->subject", 0.30, 0.29), ("verb->object", 0.66 + s / 100, 0.28)):
                roles.append({"run": run, **common, "relation": rel, "score": score, "offset_share": base,
                              "margin": score - base, "has_head": int(score >= 0.5 and score - base >= 0.1)})
            for layer, head, who, what, specific, vs in ((0, 0, 1, 0, 0.1, 0.0), (1, 3, 0, 1, 0.4 + s / 100, 0.2),
                                                          (1, 1, 0, 0, 0.05, -0.1)):
                abl.append({"run": run, **common, "layer": layer, "head": head, "is_who_head": who, "is_what_head": what,
                            "specific_who": specific, "specific_what": specific, "loss_change_who_tokens": specific,
                            "loss_change_other_who": 0.0, "loss_change_what_tokens": specific, "loss_change_other_what": 0.0,
                            "intransitive_tokens": 80, "what_vs_intransitive": vs})
        for name, rows in (("runs.csv", runs), ("roles.csv", roles)):
            with open(os.path.join(d, name), "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        with gzip.open(os.path.join(d, "ablation.csv.gz"), "wt", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(abl[0]))
            w.writeheader()
            w.writerows(abl)
        p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "experiments", "roles_v2.py"), "report", d],
                           capture_output=True, text=True, timeout=120)
        out = p.stdout
        check(p.returncode == 0, f"roles_v2.py report exits 0 ({p.stderr.strip()[-300:]})")
        check("**T1 who**" in out and "no setting has one" in out.split("**T1 who**")[1].split("\n")[0],
              "roles_v2 report: T1 who finds no setting")
        check("settings with a head: width L2 h4" in out.split("**T1 what**")[1].split("\n")[0],
              "roles_v2 report: T1 what finds the setting (6 seeds, every margin above 0.1)")
        t3 = out.split("- **T3** ")[1].split("\n")[0]
        check("over 6 pairs" in t3, f"roles_v2 report: T3 over the 6 runs with a what head: {t3}")
        for kind, want in (("what head", "+0.2000"), ("who head", "+0.0000"), ("random head", "-0.1000")):
            check(re.search(rf"^\| {kind} \| 6 \| {re.escape(want)} \| 80 \|$", out, re.M) is not None,
                  f"roles_v2 report: the described table's {kind} row is the mean over the runs ({want})")


def test_lr_grid_table():
    """experiments/README.md's table of where each lr sits is what lr_grid.py makes from the committed
    files, and the script classes an lr by its place in the grid."""
    sys.path.insert(0, os.path.join(ROOT, "tools", "experiments"))
    import lr_grid
    check([lr_grid.position(x, [1e-3, 3e-3, 1e-2]) for x in (1e-3, 3e-3, 1e-2)] == ["lowest", "interior", "highest"],
          "lr_grid.position: lowest, interior, highest")
    check(lr_grid.position(1e-3, [1e-3]) == "one lr", "lr_grid.position: a grid of one lr")
    check(lr_grid.summary(["highest", "interior", "highest"]) == "1 interior, 2 highest", "lr_grid.summary counts")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "experiments", "lr_grid.py")],
                       capture_output=True, text=True, timeout=120)
    readme = open(os.path.join(ROOT, "experiments", "README.md")).read()
    block = readme.split("<!-- lr_grid.py -->\n", 1)[-1].split("<!-- /lr_grid.py -->", 1)[0]
    check(p.returncode == 0 and block == p.stdout,
          "experiments/README.md's lr table is lr_grid.py's output (rerun the script and paste it between the markers)")


def main():
    for test in (test_wilson, test_fisher, test_mann_whitney, test_permutation, test_bootstrap_t, test_welch, test_holm,
                 test_kaplan_meier, test_select, test_spearman, test_spearman_strata, test_wilcoxon, test_lr_estimates,
                 test_end_to_end, test_committed_reports, test_report_only_keeps, test_roles_v2,
                 test_lr_grid_table):
        try:
            test()
        except Exception as e:  # a crash is a failure of that test, not of the script
            import traceback
            traceback.print_exc()
            check(False, f"{test.__name__} raised {type(e).__name__}: {e}")
    print(f"{checks} checks, {len(failures)} failed")
    return 0 if checks and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
