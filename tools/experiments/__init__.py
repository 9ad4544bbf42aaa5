"""Statistics and reporting for the qkv experiments (docs/experiment-method.md).

  stats.py    pure functions: Wilson, Fisher, Mann-Whitney, permutation, bootstrap, t, Holm,
              Kaplan-Meier, median/IQR, Spearman (stratified, permutation p), Wilcoxon
  select.py   learning-rate selection on the validation split (tuning seeds, cross-fitting)
  report.py   the CLI: table, trend, plot-curves, plot-rate, heatmap

Import as a package (`from experiments import stats`, with scripts/ on sys.path): the module
name `select` is also a built-in module, which a plain `import select` would find first.
"""


def num(cell):
    """A CSV cell as a float; nan when it is empty or not a number."""
    try:
        return float(cell)
    except (TypeError, ValueError):
        return float("nan")
