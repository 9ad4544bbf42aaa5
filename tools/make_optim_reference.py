#!/usr/bin/python3
"""Reference values for tests/optim/test_optimizers.cpp, computed with torch.optim (torch 1.13).

Two parameters, "w" (2, 3) and "b" (3,), start at p[j][i] = ((5*i + 3*j) % 7 - 3) / 3 and get,
at step s (0-based), the gradient g[j][i] = ((7*i + 3*s + 5*j) % 11 - 5) / 4 (values exact in
binary, so the C++ test builds the very same inputs). After STEPS steps the script prints each
case's parameter values (row-major, float64) as C++ initializer lists to paste into the test.

    /usr/bin/python3 tools/make_optim_reference.py
"""
import torch

torch.set_default_dtype(torch.float64)
STEPS = 4
SHAPES = [(2, 3), (3,)]


def params():
    out = []
    for j, shape in enumerate(SHAPES):
        n = 1
        for d in shape:
            n *= d
        vals = [((5 * i + 3 * j) % 7 - 3) / 3 for i in range(n)]
        out.append(torch.tensor(vals).reshape(shape).requires_grad_(True))
    return out


def grad(j, s, shape):
    n = 1
    for d in shape:
        n *= d
    return torch.tensor([((7 * i + 3 * s + 5 * j) % 11 - 5) / 4 for i in range(n)]).reshape(shape)


def run(make):
    ps = params()
    opt = make(ps)
    for s in range(STEPS):
        for j, p in enumerate(ps):
            p.grad = grad(j, s, p.shape)
        opt.step()
    return [v for p in ps for v in p.detach().reshape(-1).tolist()]


def one(opt_cls, **kw):
    return lambda ps: opt_cls(ps, **kw)


def groups(opt_cls, g0, g1, **kw):
    return lambda ps: opt_cls([dict(params=[ps[0]], **g0), dict(params=[ps[1]], **g1)], **kw)


CASES = {
    "sgd_plain": one(torch.optim.SGD, lr=0.1),
    "sgd_momentum": one(torch.optim.SGD, lr=0.1, momentum=0.9),
    "sgd_dampening_wd": one(torch.optim.SGD, lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05),
    "sgd_nesterov_wd": one(torch.optim.SGD, lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.1),
    "adam": one(torch.optim.Adam, lr=0.01),
    "adam_wd": one(torch.optim.Adam, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1),
    "adamw": one(torch.optim.AdamW, lr=0.01, weight_decay=0.1),
    "adamw_groups": groups(torch.optim.AdamW, dict(lr=0.02, weight_decay=0.2), dict(lr=0.005, weight_decay=0.0)),
    "sgd_groups": groups(torch.optim.SGD, dict(lr=0.05, weight_decay=0.1), dict(lr=0.2, weight_decay=0.0),
                         momentum=0.5),
    "adam_groups": groups(torch.optim.Adam, dict(lr=0.03, weight_decay=0.0), dict(lr=0.01, weight_decay=0.3)),
}

if __name__ == "__main__":
    print(f"// torch {torch.__version__}, {STEPS} steps")
    for name, make in CASES.items():
        vals = ", ".join(repr(v) for v in run(make))
        print(f"const std::vector<double> k_{name} = {{{vals}}};")
