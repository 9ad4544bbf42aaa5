"""Metrics of the logits, with their gradient: what run_with_cache(incl_bwd=True) differentiates
and qkv.attribute attributes. A metric maps the logits (B, T, V) to one number; its gradient with
respect to the logits (same shape) starts the backward pass on qkv's tape."""

import numpy as np


class Metric:
    """fn(logits) -> float, and grad(logits) -> array of the logits' shape (d fn / d logits).
    Without grad, central differences of fn give it (one pair of calls per logit, step 1e-3
    scaled by the logit): exact enough for a smooth fn, slow for large logits."""

    def __init__(self, fn, grad=None, name="custom"):
        if not callable(fn):
            raise TypeError(f"Metric: fn is not callable ({fn!r})")
        if grad is not None and not callable(grad):
            raise TypeError(f"Metric: grad is not callable ({grad!r})")
        self.fn, self.grad, self.name = fn, grad, name

    def __call__(self, logits):
        v = self.fn(logits)
        if np.ndim(v) != 0:
            raise ValueError(f"metric: expected one number, found an array of shape {np.shape(v)}")
        return float(v)

    def value_and_grad(self, logits):
        """(fn(logits), d fn / d logits) as float and float32 array."""
        value = self(logits)
        if self.grad is not None:
            g = np.asarray(self.grad(logits), dtype=np.float32)
            if g.shape != logits.shape:
                raise ValueError(f"metric: its gradient has shape {g.shape}; expected the logits' {logits.shape}")
            return value, g
        if logits.size > 200_000:
            raise ValueError(f"metric: the logits have {logits.size} entries, too many to differentiate the metric "
                             f"numerically; give Metric(fn, grad)")
        z = np.array(logits, dtype=np.float32)
        g = np.zeros(z.shape, dtype=np.float32)
        flat, gflat = z.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            x = flat[i]
            h = np.float32(1e-3) * max(np.float32(1), abs(x))
            flat[i] = x + h
            up = self(z)
            flat[i] = x - h
            down = self(z)
            flat[i] = x
            gflat[i] = (up - down) / (2.0 * float(h))
        return value, g

    def __repr__(self):
        return f"qkv.Metric({self.name})"


def logit_diff(position, answer, wrong, row=0):
    """logits[row, position, answer] - logits[row, position, wrong] (ids), the metric of qkv patch
    and qkv attribute; its gradient is +1 and -1 there."""
    position, answer, wrong, row = int(position), int(answer), int(wrong), int(row)

    def grad(z):
        g = np.zeros(z.shape, dtype=np.float32)
        g[row, position, answer] += 1
        g[row, position, wrong] -= 1
        return g

    return Metric(lambda z: float(z[row, position, answer]) - float(z[row, position, wrong]), grad,
                  f"logit_diff(position={position}, answer={answer}, wrong={wrong})")


def loss(targets, positions=None):
    """The mean cross-entropy (nats) of the logits against `targets` (B, T) at the scored
    positions: those with a target >= 0 (-100: not scored, as the model's batches mark them), or,
    given `positions`, only those (a list of t, or (b, t) pairs). Gradient (softmax - onehot) / n."""
    targets = np.asarray(targets)
    if targets.ndim == 1:
        targets = targets[None]
    mask = targets >= 0
    if positions is not None:
        chosen = np.zeros_like(mask)
        for p in positions:
            b, t = (0, p) if np.isscalar(p) else p
            chosen[int(b), int(t)] = True
        mask &= chosen
    n = int(mask.sum())
    if n == 0:
        raise ValueError("loss: no scored position (every target is -100 there)")

    def parts(z):
        if z.shape[:2] != targets.shape:
            raise ValueError(f"loss: targets have shape {targets.shape}; the logits {z.shape}")
        z = z.astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return logp

    def fn(z):
        logp = parts(z)
        b, t = np.nonzero(mask)
        return float(-logp[b, t, targets[b, t]].sum() / n)

    def grad(z):
        p = np.exp(parts(z))
        b, t = np.nonzero(mask)
        g = np.zeros(z.shape, dtype=np.float64)
        g[b, t] = p[b, t]
        g[b, t, targets[b, t]] -= 1
        return (g / n).astype(np.float32)

    return Metric(fn, grad, f"loss({n} positions)")


def as_metric(metric, what):
    """A Metric from what a caller gave: a Metric, or a function of the logits."""
    if isinstance(metric, Metric):
        return metric
    if callable(metric):
        return Metric(metric)
    if metric is None:
        raise ValueError(f"{what}: incl_bwd=True needs a metric: qkv.logit_diff(position, answer, wrong), "
                         f"qkv.loss(targets), qkv.Metric(fn, grad) or a function of the logits")
    raise TypeError(f"{what}: expected a qkv.Metric or a function of the logits, found {metric!r}")
