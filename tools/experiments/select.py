"""Learning-rate selection on the validation split, per setting.

For each setting (the values of the grid keys other than the learning rate) and each learning rate
tried, take the mean of a validation metric over the seeds that every lr of the setting ran (the
tuning seeds: a paired comparison; runs carry a "seed" column, and without one, or with no seed
common to all, each lr's mean is over all its runs); pick the lr with the best mean (lowest for
direction "min", highest for "max"), ties (equal to 1e-12 relative) going to the lower lr. More
seeds added later at the chosen lr only are reported with it but do not change the choice. A run
whose validation metric is missing or not finite (diverged) counts as the worst possible value, so
an lr where any seed diverged loses to one where none did. The test metrics reported for the
setting are then those of the chosen lr's runs only.
"""
import math
from collections import namedtuple

from . import num

Candidate = namedtuple("Candidate", "lr score n")
Choice = namedtuple("Choice", "lr score n candidates")


def lr_column(rows, preferred="lr"):
    """The column holding the learning rate: `preferred`, else the grid key optimizer.lr, else None."""
    names = set().union(*(r.keys() for r in rows)) if rows else set()
    for name in (preferred, "optimizer.lr"):
        if name in names:
            return name
    return None


def select_lr(rows, keys, metric="val_loss", direction="min", lr_key="lr"):
    """Pick one learning rate per setting.

    rows: dicts (one per run, as read from results.csv) holding `keys`, `lr_key` and `metric`.
    keys: the columns that define a setting (the learning rate column is ignored if listed).
    Returns (choices, kept): choices maps each setting (tuple of the key values, as strings) to
    Choice(lr, score, n, candidates) with candidates = [Candidate(lr, mean, n)] in lr order (n: the
    seeds the mean is over);
    kept is the rows of the chosen lr of every setting, in input order. Without an lr column
    every row is kept and each Choice has lr None.
    """
    if direction not in ("min", "max"):
        raise ValueError(f"select_lr: direction must be min or max, found {direction!r}")
    keys = [k for k in keys if k != lr_key]
    worst = math.inf if direction == "min" else -math.inf
    by_setting = {}
    for r in rows:
        by_setting.setdefault(tuple(r.get(k, "") for k in keys), {}).setdefault(r.get(lr_key), []).append(r)
    choices, chosen_lr = {}, {}
    for setting, by_lr in by_setting.items():
        if lr_key is None or list(by_lr) == [None]:
            choices[setting] = Choice(None, math.nan, sum(map(len, by_lr.values())), [])
            continue
        seeds = [{r.get("seed") for r in runs} for runs in by_lr.values()]
        common = set.intersection(*seeds) - {None, ""}
        cands = []
        for lr, runs in sorted(by_lr.items(), key=lambda kv: num(kv[0])):
            if common:
                runs = [r for r in runs if r.get("seed") in common]
            vals = [num(r.get(metric)) for r in runs]
            vals = [v if math.isfinite(v) else worst for v in vals]
            cands.append(Candidate(lr, sum(vals) / len(vals), len(vals)))
        best = cands[0]
        for c in cands[1:]:  # in increasing lr: replace only when strictly better (ties: lower lr)
            tol = 1e-12 * max(1.0, abs(best.score)) if math.isfinite(best.score) else 0
            if (c.score < best.score - tol) if direction == "min" else (c.score > best.score + tol):
                best = c
        choices[setting] = Choice(best.lr, best.score, best.n, cands)
        chosen_lr[setting] = best.lr
    kept = [r for r in rows if chosen_lr.get(tuple(r.get(k, "") for k in keys), r.get(lr_key)) == r.get(lr_key)]
    return choices, kept


def tuning_seeds(rows, keys, lr_key="lr"):
    """{setting: the seeds every lr of the setting ran} (the seeds select_lr compares the lrs on;
    empty when there is no lr column or no seed common to all)."""
    keys = [k for k in keys if k != lr_key]
    by_setting = {}
    for r in rows:
        by_setting.setdefault(tuple(r.get(k, "") for k in keys), {}).setdefault(r.get(lr_key), set()).add(r.get("seed"))
    return {s: set.intersection(*by_lr.values()) - {None, ""} if lr_key else set() for s, by_lr in by_setting.items()}


def select_lr_crossfit(rows, keys, metric="val_loss", direction="min", lr_key="lr"):
    """Two-fold cross-fitting of the lr choice over seeds, for an estimate free of the winner's
    curse when the lrs were compared on the seeds that are reported: the tuning seeds of a setting
    (those every lr ran) are split into odd and even by rank (1st, 3rd, ... and 2nd, 4th, ...), and
    each fold's runs are reported at the lr chosen (select_lr) on the *other* fold, so no reported
    run took part in choosing its own lr. Runs of seeds that did not run at every lr (added later at
    one lr) took no part in any choice: they are reported at the lr chosen on all the tuning seeds,
    when they ran at it. A setting needs 2 or more tuning seeds (else ValueError).
    Returns (folds, kept): folds maps each setting to (Choice applied to the first fold, Choice
    applied to the second), each made on the other fold; kept is the reported rows in input order."""
    keys = [k for k in keys if k != lr_key]
    by_setting = {}
    for r in rows:
        by_setting.setdefault(tuple(r.get(k, "") for k in keys), []).append(r)
    tuning = tuning_seeds(rows, keys, lr_key)
    folds, keep = {}, set()
    for setting, runs in by_setting.items():
        order = sorted(tuning[setting], key=lambda s: (num(s), s))
        if len(order) < 2:
            raise ValueError(f"select_lr_crossfit: setting {setting} has {len(order)} seed(s) that every lr ran; "
                             "two folds need 2 or more")
        fold = [set(order[0::2]), set(order[1::2])]
        pair = []
        for mine, other in ((fold[0], fold[1]), (fold[1], fold[0])):
            choice, _ = select_lr([r for r in runs if r.get("seed") in other], keys, metric, direction, lr_key)
            c = choice[setting]
            pair.append(c)
            keep.update(id(r) for r in runs if r.get("seed") in mine and r.get(lr_key) == c.lr)
        folds[setting] = tuple(pair)
        whole, _ = select_lr([r for r in runs if r.get("seed") in tuning[setting]], keys, metric, direction, lr_key)
        keep.update(id(r) for r in runs if r.get("seed") not in tuning[setting] and r.get(lr_key) == whole[setting].lr)
    return folds, [r for r in rows if id(r) in keep]
