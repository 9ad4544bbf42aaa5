"""Statistics for the experiment reports: pure functions over lists of numbers, numpy only.

Every function states its formula and a reference. Results are small namedtuples. 95 % is the
default level everywhere (alpha = 0.05); z and t quantiles come from statistics.NormalDist and
the closed-form Student t distribution below, so nothing here needs scipy.
"""
import itertools
import math
from collections import namedtuple
from fractions import Fraction
from statistics import NormalDist

import numpy as np

Proportion = namedtuple("Proportion", "k n p low high")
Estimate = namedtuple("Estimate", "value low high n method")
Test = namedtuple("Test", "statistic p method")
Spread = namedtuple("Spread", "median q1 q3 n")
KMStep = namedtuple("KMStep", "t at_risk events censored surv greenwood")
Reached = namedtuple("Reached", "step fraction low high method")
CensoredMedian = namedtuple("CensoredMedian", "value reached n events")


def _z(alpha):
    return NormalDist().inv_cdf(1 - alpha / 2)


def _finite(values):
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def wilson(k, n, alpha=0.05):
    """Wilson score interval for a binomial proportion k/n (no continuity correction).

    With p = k/n and z = Phi^-1(1 - alpha/2):
        centre = (p + z^2/(2n)) / (1 + z^2/n)
        half   = z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/(4n^2))
    The interval [centre - half, centre + half] always lies in [0, 1]; for k = 0 the lower end is
    exactly 0 and for k = n the upper end exactly 1 (set so, not left to rounding).
    n = 0 gives p = low = high = nan.
    Ref: E. B. Wilson, JASA 22 (1927) 209-212; Brown, Cai & DasGupta, Stat. Sci. 16 (2001) 101-133.
    """
    if n == 0:
        return Proportion(0, 0, math.nan, math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"wilson: expected 0 <= k <= n, found k={k}, n={n}")
    z = _z(alpha)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Proportion(k, n, p, low, high)


def fisher_exact(a, b, c, d):
    """Exact two-sided Fisher test of the 2x2 table [[a, b], [c, d]] (rows: groups, columns:
    success / failure). Returns Test(statistic = sample odds ratio a*d/(b*c), p, "fisher").

    With the margins fixed, a is hypergeometric: P(a = x) = C(a+b, x) C(c+d, a+c-x) / C(n, a+c).
    The two-sided p is the sum of P(x) over every x with P(x) <= P(a) (the tables no more
    probable than the one observed), as in R's fisher.test. The sum is computed in integers, so
    it is exact (no tolerance for ties between equally probable tables is needed).
    Ref: R. A. Fisher, The Design of Experiments (1935) ch. 2; A. Agresti, Categorical Data
    Analysis, 2nd ed. (2002) sec. 3.5.
    """
    if min(a, b, c, d) < 0:
        raise ValueError(f"fisher_exact: cells must be >= 0, found {[a, b, c, d]}")
    r1, r2, c1 = a + b, c + d, a + c
    n = r1 + r2
    weight = [math.comb(r1, x) * math.comb(r2, c1 - x) for x in range(max(0, c1 - r2), min(r1, c1) + 1)]
    observed = math.comb(r1, a) * math.comb(r2, c1 - a)
    p = Fraction(sum(w for w in weight if w <= observed), math.comb(n, c1)) if n else Fraction(1)
    odds = (a * d) / (b * c) if b * c else (math.inf if a * d else math.nan)
    return Test(odds, min(1.0, float(p)), "fisher")


def ranks(values):
    """Ranks 1..n of values, ties given the mean of the ranks they span (midranks)."""
    v = np.asarray(values, dtype=float)
    order = np.argsort(v, kind="mergesort")
    r = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return r


def _u_counts(m, n):
    """Number of arrangements giving each U = 0..m*n for samples of sizes m and n without ties:
    the coefficients of the Gaussian binomial [m+n choose m]_q = prod_i (1 - q^(n+i)) / (1 - q^i),
    built one factor at a time (multiply, then divide as a power series), in exact integers."""
    c = [1] + [0] * (m * n)
    for i in range(1, m + 1):
        for k in range(m * n, n + i - 1, -1):
            c[k] -= c[k - n - i]
        for k in range(i, m * n + 1):
            c[k] += c[k - i]
    return c


def mann_whitney(x, y, exact_max=2500):
    """Two-sided Mann-Whitney U (Wilcoxon rank-sum) test of x against y.

    U = R_x - n_x(n_x+1)/2, R_x the sum of x's midranks in the pooled sample; U counts the pairs
    with x_i > y_j, ties counting 1/2. U / (n_x n_y) is the probability that a random x exceeds
    a random y (reported by callers as the effect size).
    - "exact" (no ties and n_x n_y <= exact_max): the null distribution of U by counting
      arrangements (_u_counts); p = min(1, 2 min(P(U <= u), P(U >= u))).
    - "normal" otherwise: z = (|U - n_x n_y/2| - 1/2) / sigma with continuity correction and
      sigma^2 = n_x n_y/12 [(N+1) - sum_t (t^3 - t) / (N(N-1))] (t: sizes of the tie groups);
      p = 2 (1 - Phi(z)). All values tied: p = 1.
    Returns Test(U, p, method), method "exact" or "normal".
    Ref: Mann & Whitney, Ann. Math. Stat. 18 (1947) 50-60; Hollander, Wolfe & Chicken,
    Nonparametric Statistical Methods, 3rd ed. (2014) sec. 4.1.
    """
    x, y = _finite(x), _finite(y)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        return Test(math.nan, math.nan, "none")
    r = ranks(x + y)
    u = float(r[:m].sum() - m * (m + 1) / 2)
    _, tie_sizes = np.unique(x + y, return_counts=True)
    if len(tie_sizes) == m + n and m * n <= exact_max:
        counts = _u_counts(m, n)
        total = math.comb(m + n, m)
        k = int(round(u))
        lower, upper = sum(counts[:k + 1]), sum(counts[k:])
        return Test(u, min(1.0, 2 * min(lower, upper) / total), "exact")
    N = m + n
    var = m * n / 12 * ((N + 1) - float((tie_sizes ** 3 - tie_sizes).sum()) / (N * (N - 1)))
    if var <= 0:
        return Test(u, 1.0, "normal")
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(var)
    return Test(u, math.erfc(z / math.sqrt(2)), "normal")


def permutation_test(x, y, n_perm=10000, seed=0):
    """Two-sided permutation test of mean(x) - mean(y) = 0.

    The statistic d = mean(x) - mean(y); under the null every split of the pooled values into
    groups of sizes n_x, n_y is equally likely.
    - "exact": when C(N, n_x) <= n_perm, every split is enumerated; p = #{|d*| >= |d|} / C(N, n_x).
    - "random": otherwise n_perm random splits (numpy Generator seeded with `seed`);
      p = (1 + #{|d*| >= |d|}) / (1 + n_perm), which counts the observed split and is never 0.
    |d*| >= |d| is tested with a relative slack of 1e-9, so that splits equal to the observed one
    up to rounding count. Returns Test(d, p, method).
    Ref: P. Good, Permutation, Parametric and Bootstrap Tests of Hypotheses, 3rd ed. (2005)
    ch. 3; Phipson & Smyth, Stat. Appl. Genet. Mol. Biol. 9 (2010) 39 (the +1).
    """
    x, y = _finite(x), _finite(y)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        return Test(math.nan, math.nan, "none")
    pooled = np.array(x + y)
    total = pooled.sum()
    d = pooled[:m].mean() - pooled[m:].mean()
    slack = 1e-9 * max(1.0, abs(d))

    def diffs(sums):  # mean(x*) - mean(y*) from the sums of the x* groups
        return sums / m - (total - sums) / n

    if math.comb(m + n, m) <= n_perm:
        sums = np.array([pooled[list(idx)].sum() for idx in itertools.combinations(range(m + n), m)])
        return Test(float(d), float(np.mean(np.abs(diffs(sums)) >= abs(d) - slack)), "exact")
    rng = np.random.default_rng(seed)
    sums = np.array([pooled[rng.permutation(m + n)[:m]].sum() for _ in range(n_perm)])
    hits = int(np.sum(np.abs(diffs(sums)) >= abs(d) - slack))
    return Test(float(d), (1 + hits) / (1 + n_perm), "random")


def bootstrap_ci(values, statistic="mean", n_boot=10000, alpha=0.05, seed=0):
    """Percentile bootstrap confidence interval for the mean or the median.

    n_boot resamples of size n drawn with replacement (numpy Generator seeded with `seed`); the
    interval is the alpha/2 and 1 - alpha/2 percentiles (linear interpolation) of the statistic
    over the resamples. Fewer than 2 values: low = high = nan. With few values (n < 10) the
    percentile interval is too narrow (its coverage is below 1 - alpha), see t_interval.
    Returns Estimate(statistic of the data, low, high, n, "bootstrap").
    Ref: Efron & Tibshirani, An Introduction to the Bootstrap (1993) ch. 13.
    """
    v = np.array(_finite(values))
    f = {"mean": np.mean, "median": np.median}[statistic]
    if len(v) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, "bootstrap")
    if len(v) < 2:
        return Estimate(float(f(v)), math.nan, math.nan, len(v), "bootstrap")
    rng = np.random.default_rng(seed)
    boot = f(v[rng.integers(0, len(v), size=(n_boot, len(v)))], axis=1)
    low, high = np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)])
    return Estimate(float(f(v)), float(low), float(high), len(v), "bootstrap")


def t_abs_cdf(t, df):
    """P(|T| <= t) for Student's t with integer df >= 1, in closed form (Abramowitz & Stegun
    26.7.3-4): with theta = atan(t / sqrt(df)) and c = cos^2 theta,
      df = 1:   2 theta / pi
      df odd:   (2/pi) [theta + sin theta cos theta (1 + (2/3) c + (2*4)/(3*5) c^2 + ... )]
      df even:  sin theta (1 + (1/2) c + (1*3)/(2*4) c^2 + ... )
    the series ending at the term in c^((df-3)/2) (odd) or c^((df-2)/2) (even)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c = math.cos(theta) ** 2
    term = total = 1.0
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        for k in range(1, (df - 3) // 2 + 1):
            term *= c * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, (df - 2) // 2 + 1):
        term *= c * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_quantile(df, alpha=0.05):
    """The two-sided critical value t with P(|T| <= t) = 1 - alpha, by bisection on t_abs_cdf."""
    hi = 1.0
    while t_abs_cdf(hi, df) < 1 - alpha:
        hi *= 2
    lo = 0.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_abs_cdf(mid, df) < 1 - alpha else (lo, mid)
    return (lo + hi) / 2


def t_interval(values, alpha=0.05):
    """Student t confidence interval for a mean: mean +- t_{1-alpha/2, n-1} s / sqrt(n), s the
    sample standard deviation (ddof 1). Exact for normal data; the honest width with 3 seeds
    (t = 4.30 for n = 3), where a percentile bootstrap is far too narrow. Fewer than 2 values:
    low = high = nan. Returns Estimate(mean, low, high, n, "t").
    Ref: W. S. Gosset ("Student"), Biometrika 6 (1908) 1-25.
    """
    v = np.array(_finite(values))
    if len(v) < 2:
        return Estimate(float(v.mean()) if len(v) else math.nan, math.nan, math.nan, len(v), "t")
    half = t_quantile(len(v) - 1, alpha) * v.std(ddof=1) / math.sqrt(len(v))
    return Estimate(float(v.mean()), float(v.mean() - half), float(v.mean() + half), len(v), "t")


def welch_t(x, y):
    """Two-sided Welch t-test of mean(x) = mean(y) (unequal variances).

    t = (mean x - mean y) / sqrt(s_x^2/n_x + s_y^2/n_y), with Welch-Satterthwaite degrees of freedom
    df = (s_x^2/n_x + s_y^2/n_y)^2 / [(s_x^2/n_x)^2/(n_x-1) + (s_y^2/n_y)^2/(n_y-1)];
    p = 1 - P(|T_df'| <= |t|) with df' = floor(df) (t_abs_cdf takes integer df; rounding down makes
    p slightly larger, i.e. conservative). The one test here that can reach p < 0.05 with 3 runs
    per arm (rank and permutation tests cannot: their smallest p for 3 vs 3 is 2/20 = 0.1), at the
    price of assuming roughly normal values. Needs 2+ values per arm; no spread at all: p = 1 if
    the means are equal, else 0. Returns Test(t, p, "welch df=<df>").
    Ref: B. L. Welch, Biometrika 34 (1947) 28-35.
    """
    x, y = np.array(_finite(x)), np.array(_finite(y))
    if len(x) < 2 or len(y) < 2:
        return Test(math.nan, math.nan, "none")
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    diff = float(x.mean() - y.mean())
    if vx + vy == 0:
        return Test(math.copysign(math.inf, diff) if diff else 0.0, 0.0 if diff else 1.0, "welch")
    t = diff / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    return Test(t, max(0.0, 1 - t_abs_cdf(t, max(1, math.floor(df + 1e-9)))), f"welch df={df:.1f}")


def welch_interval(x, y, alpha=0.05):
    """Welch confidence interval for mean(x) - mean(y): diff +- t_{1-alpha/2, df'} sqrt(s_x^2/n_x +
    s_y^2/n_y), df' the Welch-Satterthwaite degrees of freedom rounded down (as welch_t; wider, so
    conservative). Fewer than 2 values in an arm: low = high = nan. Returns Estimate(diff, low,
    high, n_x + n_y, "welch").
    """
    x, y = np.array(_finite(x)), np.array(_finite(y))
    if len(x) < 2 or len(y) < 2:
        diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
        return Estimate(diff, math.nan, math.nan, len(x) + len(y), "welch")
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    diff = float(x.mean() - y.mean())
    if vx + vy == 0:
        return Estimate(diff, diff, diff, len(x) + len(y), "welch")
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    half = t_quantile(max(1, math.floor(df + 1e-9)), alpha) * math.sqrt(vx + vy)
    return Estimate(diff, diff - half, diff + half, len(x) + len(y), "welch")


def holm(pvalues):
    """Holm-Bonferroni adjusted p-values, in the input order.

    With the m p-values sorted p_(1) <= ... <= p_(m):
        adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    Rejecting where adj <= alpha controls the family-wise error rate at alpha. NaN entries (tests
    that could not be run) are left NaN and do not count in m.
    Ref: S. Holm, Scand. J. Statist. 6 (1979) 65-70.
    """
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (len(idx) - rank) * pvalues[i]))
        out[i] = running
    return out


def kaplan_meier(times, reached):
    """Kaplan-Meier estimate of S(t) = P(a run has not reached the target by step t).

    times[i]: the step run i reached the target (reached[i] true) or its last step (censored:
    it stopped without reaching it). At each distinct time t with n runs at risk (time >= t) and
    d of them reaching the target there:  S(t) = prod_{t_i <= t} (1 - d_i / n_i). A run
    censored at t counts as at risk at t (reaching comes first). Greenwood's sum
    G(t) = sum_{t_i <= t} d_i / (n_i (n_i - d_i)) gives Var S(t) = S(t)^2 G(t).
    Returns a list of KMStep(t, at_risk, events, censored, surv, greenwood), one per distinct time.
    Ref: Kaplan & Meier, JASA 53 (1958) 457-481; M. Greenwood, Rep. Public Health Med. Subj. 33 (1926).
    """
    pairs = sorted(zip(map(float, times), map(bool, reached)))
    steps, surv, g, at_risk, i = [], 1.0, 0.0, len(pairs), 0
    while i < len(pairs):
        t = pairs[i][0]
        group = [e for tt, e in pairs[i:] if tt == t]
        d = sum(group)
        surv *= 1 - d / at_risk
        g += d / (at_risk * (at_risk - d)) if at_risk > d else math.inf
        steps.append(KMStep(t, at_risk, d, len(group) - d, surv, g))
        at_risk -= len(group)
        i += len(group)
    return steps


def fraction_reached(times, reached, step, alpha=0.05):
    """Fraction of runs that reached the target by `step`: F(step) = 1 - S(step), Kaplan-Meier.

    CI: if no run was censored before `step`, F(step) is exactly k/n (k runs reached it by then)
    and the Wilson interval is used ("wilson"). Otherwise the log-log Greenwood interval of S,
    S^exp(+-z se) with se = sqrt(G) / |log S|, mapped to F ("greenwood-loglog"); it also stays in
    [0, 1] but is undefined for S = 0 or 1 (low = high = nan then).
    Ref: Kalbfleisch & Prentice, The Statistical Analysis of Failure Time Data, 2nd ed. (2002) sec. 1.4.
    """
    n = len(times)
    if n == 0:
        return Reached(step, math.nan, math.nan, math.nan, "none")
    if all(r or t >= step for t, r in zip(times, reached)):
        k = sum(1 for t, r in zip(times, reached) if r and t <= step)
        w = wilson(k, n, alpha)
        return Reached(step, w.p, w.low, w.high, "wilson")
    surv, g = 1.0, 0.0
    for s in kaplan_meier(times, reached):
        if s.t > step:
            break
        surv, g = s.surv, s.greenwood
    if surv in (0.0, 1.0) or math.isinf(g):
        return Reached(step, 1 - surv, math.nan, math.nan, "greenwood-loglog")
    se = math.sqrt(g) / abs(math.log(surv))
    z = _z(alpha)
    s_low, s_high = surv ** math.exp(z * se), surv ** math.exp(-z * se)
    return Reached(step, 1 - surv, 1 - s_high, 1 - s_low, "greenwood-loglog")


def censored_median(times, reached):
    """Median steps to target with censoring: the smallest t at which the Kaplan-Meier fraction
    reached is >= 1/2 (S(t) <= 1/2). If fewer than half are ever seen to reach it, the median is
    not reached: value = the last observed time, reached = False (report it as "> value").
    Ref: J. P. Klein & M. L. Moeschberger, Survival Analysis, 2nd ed. (2003) sec. 4.5.
    """
    steps = kaplan_meier(times, reached)
    events = sum(map(bool, reached))
    for s in steps:
        if s.surv <= 0.5 + 1e-12:
            return CensoredMedian(s.t, True, len(times), events)
    return CensoredMedian(steps[-1].t if steps else math.nan, False, len(times), events)


def median_iqr(values):
    """Median and interquartile range (25th and 75th percentiles, linear interpolation between
    order statistics: Hyndman & Fan type 7, numpy's default) of the finite values.
    Ref: Hyndman & Fan, Am. Stat. 50 (1996) 361-365."""
    v = _finite(values)
    if not v:
        return Spread(math.nan, math.nan, math.nan, 0)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return Spread(float(med), float(q1), float(q3), len(v))


def spearman(x, y):
    """Spearman's rank correlation: Pearson's r of the midranks of x and of y; nan when either
    is constant."""
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    d = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum()) / d if d > 0 else float("nan")


def spearman_test(x, y, n_perm=10000, seed=0, alternative="greater", strata=None):
    """Spearman's rho of (x, y) and its permutation p-value: the share of n_perm random
    permutations of y (plus the observed order) whose rho is at least the observed one
    (alternative "greater": a rising trend), at most it ("less"), or at least its magnitude
    ("two-sided"). Exact for the permutations drawn; seeded, so repeatable.

    strata (optional, one label per pair): a stratified test. The statistic is the mean of the
    within-stratum rhos weighted by the stratum sizes (a stratum whose x or y is constant has no
    rho and weight 0), and y is permuted within each stratum only: the null hypothesis is no
    association within any stratum, whatever the strata's levels. (A trend in d_k at each head
    count, the head counts allowed to differ.) Without strata every pair is one stratum.
    Since only y moves, its midranks are computed once and permuted (the rho of (x, y permuted)
    is that of their midranks). Returns (rho, p)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    labels = [0] * len(x) if strata is None else list(strata)
    if len(labels) != len(x) or len(y) != len(x):
        raise ValueError(f"spearman_test: x, y and strata must have one entry per pair, found {len(x)}, {len(y)}, {len(labels)}")
    groups = []  # (indices, centred x ranks, centred y ranks, denominator), strata with a defined rho
    for s in dict.fromkeys(labels):
        idx = np.array([i for i, v in enumerate(labels) if v == s])
        rx, ry = ranks(x[idx]), ranks(y[idx])
        rx, ry = rx - rx.mean(), ry - ry.mean()
        d = math.sqrt(float((rx * rx).sum() * (ry * ry).sum()))
        if d > 0:
            groups.append((idx, rx, ry, d))
    if not groups:
        return float("nan"), float("nan")
    total = sum(len(g[0]) for g in groups)

    def statistic(perms):
        return sum(len(idx) * float((rx * ry[p]).sum()) / d for (idx, rx, ry, d), p in zip(groups, perms)) / total

    rho = statistic([np.arange(len(g[0])) for g in groups])
    rng = np.random.default_rng(seed)
    hit = 1  # the observed order counts as one permutation
    for _ in range(n_perm):
        r = statistic([rng.permutation(len(g[0])) for g in groups])
        if alternative == "greater":
            hit += r >= rho - 1e-12
        elif alternative == "less":
            hit += r <= rho + 1e-12
        else:
            hit += abs(r) >= abs(rho) - 1e-12
    return rho, hit / (n_perm + 1)


def wilcoxon_signed_rank(d, alternative="greater"):
    """Wilcoxon's signed-rank test of paired differences d (zeros dropped): W+ = the sum of the
    midranks of |d| over positive d. p exact by enumerating the 2^n sign patterns of the ranks
    (n <= 20), else from the normal approximation with the tie correction. alternative "greater":
    the differences tend to be positive. Returns (W+, n, p)."""
    d = np.asarray([v for v in d if v != 0 and not math.isnan(v)], dtype=float)
    n = len(d)
    if n == 0:
        return float("nan"), 0, float("nan")
    r = ranks(np.abs(d))
    w = float(r[d > 0].sum())
    total = float(r.sum())
    if n <= 20:
        # The number of sign patterns with W+ = s, by dynamic programming over the (mid)ranks
        # doubled to integers.
        two = [int(round(2 * v)) for v in r]
        counts = {0: 1}
        for k in two:
            nxt = dict(counts)
            for s, c in counts.items():
                nxt[s + k] = nxt.get(s + k, 0) + c
            counts = nxt
        w2 = int(round(2 * w))
        all_ = 2 ** n
        ge = sum(c for s, c in counts.items() if s >= w2) / all_
        le = sum(c for s, c in counts.items() if s <= w2) / all_
        p = ge if alternative == "greater" else le if alternative == "less" else min(1.0, 2 * min(ge, le))
        return w, n, p
    mean = total / 2
    var = float((r * r).sum()) / 4
    z = (w - mean) / math.sqrt(var)
    cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
    p = 1 - cdf if alternative == "greater" else cdf if alternative == "less" else 2 * min(cdf, 1 - cdf)
    return w, n, p
