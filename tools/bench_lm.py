#!/usr/bin/python3
"""qkv against a PyTorch twin of the same language model (a decoder, or a masked encoder), on the
same data and machine (docs/performance.md, "What is compared" and "How to measure").

    tools/bench_lm.py speed CONFIG [--threads 1,2] [--steps 20] [--rounds 3] [--set KEY=VALUE ...]
        training tokens/s of `qkv train CONFIG` and of the twin, same model, batch, context and
        data, interleaved rounds, medians, ratio qkv / twin, and each side's MFU (tools/mfu.py;
        the FMA peak from bench_kernels, --kernels, measured before and after the rounds). A
        config with task.objective masked trains the twin on qkv's masked windows (MaskedText)
    tools/bench_lm.py bf16 CONFIG [--threads 1,2] [--steps 20] [--rounds 3] [--set KEY=VALUE ...]
        mixed precision: qkv with train.precision fp32 and bf16 (--strict: refused where bf16
        does not pay) against the twin in float32 and under torch.autocast("cpu",
        dtype=torch.bfloat16), interleaved rounds (the order rotated each round), medians of the
        per-round ratios, MFU of the bf16 runs against the bf16 peak (bench_kernels bf16_gemm_peak,
        before and after the rounds), the oneDNN kernels each side runs (ONEDNN_VERBOSE=1) and
        the load average
    tools/bench_lm.py curve CONFIG --seconds S --out DIR [--threads 2] [--eval-every K]
            [--losses 2.5,2.0,1.9,1.81] [--steps N] [--logx]
        each trains for S seconds of wall-clock time, one after the other, evaluating the same
        validation windows every K steps: DIR/qkv.csv, DIR/torch.csv (elapsed_s, step, tokens,
        val_loss), DIR/curve.png, and a table (loss reached, time to reach given losses, tokens/s)
    tools/bench_lm.py generate CKPT [--threads 1,2] [--contexts 1,512] [--tokens 64] [--rounds 3]
        generation tokens/s of `qkv generate` with and without its KV cache against the twin with
        and without its own cache, at a 1-token prompt and at a prompt of context - 1 tokens
    tools/bench_lm.py fill CKPT [--threads 1,2] [--length 64] [--rounds 5]
        `qkv fill`'s latency (the process: start, load, one forward pass) on a text of 64
        characters with a mask every 7, against the twin's process (import torch, load, forward)
        and its forward pass alone; checks that both fill in the same characters
    tools/bench_lm.py selftest [--dir DIR]
        the commands with tiny settings on a generated corpus (seconds, not a measurement)

The twin is qkv's model written in PyTorch (scripts/pytorch/qkv_mirror.py: Decoder, qkv's parameter names
and init distributions), trained by torch.optim.AdamW with the config's lr, betas, eps and weight
decay (decayed: Linear and Embedding weights and learned positions, qkv's grouping), the same
schedule (linear warmup, then cosine to min_lr: include/qkv/optim/lr_schedule.hpp), clip_grad_norm_,
float32, torch.set_num_threads(n). It reads the corpus exactly as qkv does (scripts/pytorch/text_corpus.py)
and even draws qkv's training windows (example k of stream hash64(seed, 0)), so both see the same
batches in the same order; the validation windows are those `qkv eval` scores (checked).

Each twin runs in a child process whose environment is set before torch loads: OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS = n, OMP_WAIT_POLICY=passive (as qkv). The twin and every qkv process get the
same OPENBLAS_CORETYPE, chosen as qkv chooses its own (tools/machine.py blas_coretype: from the
CPU's features, SkylakeX with AVX-512, else Haswell with AVX2 and FMA; QKV_BLAS_CORETYPE forces one),
and the same glibc malloc settings (--malloc reuse, the default: freed memory is reused, not
returned to the kernel; machine.MALLOC_TUNABLES says why). Output names the CPU, its ISA, qkv's
BLAS kernel (`qkv info`), what torch reports (parallel_info, the OpenBLAS core it runs), the malloc
setting, the cost of a page fault, the CPUs of each thread count (a process with fewer threads than
the machine has CPUs is pinned to the first ones, both sides alike: machine.pinned_cpus) and the
machine's parallel capacity before and after the runs (machine.parallel_capacity, with a warning
when the CPUs cannot all run at full speed at once).
"""
import argparse
import csv
import ctypes
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(SCRIPTS)
sys.path.insert(0, SCRIPTS)
sys.path.insert(0, os.path.join(REPO, "scripts", "pytorch"))  # the PyTorch bridge: qkv_mirror, qkv_torch, text_corpus
sys.path.insert(1, os.path.join(REPO, "scripts"))  # convert_checkpoint, which qkv_torch imports
from machine import (MALLOC_TUNABLES, blas_coretype, comparison_env, cpu_info,  # noqa: E402
                     executable_missing, isa, kernel_mismatch, page_fault_us, parallel_capacity, pin_to,
                     pinned_cpus, report_missing, run_conditions, torch_cpu_capability, torch_missing)
import mfu  # noqa: E402

CORE, CORE_SOURCE = blas_coretype(cpu_info()[1])  # the OpenBLAS core type of every process, both sides
MALLOC = "reuse"  # --malloc


def qkv_env():
    return comparison_env(CORE, MALLOC)


# ---- the machine ----

def twin_env(threads):
    """The environment of a twin process (set before torch, and so OpenBLAS, loads)."""
    return comparison_env(CORE, MALLOC, threads=threads)


def qkv_blas(qkv):
    r = subprocess.run([qkv, "info"], capture_output=True, text=True, env=qkv_env())
    m = re.search(r"^BLAS: (.*)$", r.stdout, re.M)
    return m.group(1) if m else f"(qkv info said: {r.stdout.strip() or r.stderr.strip()})"


def torch_blas():
    """What torch reports about its threads and BLAS, in the twin's process."""
    import torch
    show = torch.__config__.show()
    info = {"torch": torch.__version__, "parallel_info": torch.__config__.parallel_info().strip(),
            "blas_info": re.findall(r"BLAS_INFO=([^,]*)", show),
            "mkl": torch.backends.mkl.is_available(), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "aten_cpu": torch_cpu_capability(show)}
    try:  # the OpenBLAS torch called through libblas.so.3, if that is OpenBLAS
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = lib.openblas_get_config.restype = ctypes.c_char_p
        info["openblas"] = f"{lib.openblas_get_config().decode()}, core {lib.openblas_get_corename().decode()}"
    except (OSError, AttributeError):
        info["openblas"] = "not loaded"
    return info


def print_machine(qkv, twin_info, threads, capacity, thread_counts):
    """The header of every table; `capacity`: run_conditions' capacities."""
    name, flags = cpu_info()
    print(f"CPU: {name} ({isa(flags)}), {os.cpu_count()} cores; OPENBLAS_CORETYPE for both: {CORE or 'unset'} "
          f"({CORE_SOURCE})")
    print(f"malloc: {MALLOC}" + (f" (GLIBC_TUNABLES={MALLOC_TUNABLES})" if MALLOC == "reuse" else "")
          + f"; a page fault costs {page_fault_us():.1f} us here")
    print("\n".join(run_conditions(capacity, thread_counts, "the runs")))
    blas = qkv_blas(qkv)
    print(f"qkv BLAS: {blas}")
    print(f"PyTorch {twin_info['torch']}: OPENBLAS_CORETYPE={twin_info['OPENBLAS_CORETYPE']}, OpenBLAS "
          f"{twin_info['openblas']}, MKL {'yes' if twin_info['mkl'] else 'no'}, BLAS_INFO {','.join(twin_info['blas_info'])}; "
          f"ATen's own CPU kernels {twin_info['aten_cpu']} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'unset')})")
    mismatch = kernel_mismatch(blas, twin_info["openblas"])
    if mismatch:
        print(mismatch)
    print(f"torch.__config__.parallel_info() with {threads} thread(s):")
    print("  " + twin_info["parallel_info"].replace("\n", "\n  "))


# ---- configs ----

def resolved_config(run_dir):
    """The config qkv wrote for a run (every key, defaults filled in)."""
    import yaml
    with open(os.path.join(run_dir, "config.yaml")) as f:
        return yaml.safe_load(f)


def qkv_sets(sets):
    return [a for s in sets for a in ("--set", s)]


# ---- the twin ----

def lr_at(s, base, sched, total):
    """qkv's LrSchedule::lr_at (s = optimizer steps already taken)."""
    W = int(sched.get("warmup_steps", 100))
    if s < W:
        return base * s / W
    name = sched.get("name", "cosine")
    if name == "constant":
        return base
    if name == "step":
        return base * float(sched.get("gamma", 0.5)) ** (s // int(sched.get("step_size", 1000)))
    min_lr = float(sched.get("min_lr", 0.0))
    if s >= total:
        return min_lr
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * (s - W) / (total - W)))


class MaskedText:
    """qkv's text task with task.objective masked (src/data/next_token.cpp, src/data/masking.hpp) on
    text_corpus's data: windows of T tokens; m = max(1, round(mask_rate T)) positions chosen by a
    partial Fisher-Yates shuffle, each replaced by [MASK] (id V) with probability 0.8, by a token
    uniform over the real ones with 0.1, kept with 0.1; targets there, -100 elsewhere. Every draw
    comes from the example's generator, as in qkv, so the twin reads qkv's very batches."""
    IGNORE = -100

    def __init__(self, task_section):
        import text_corpus
        base = text_corpus.TextTask(task_section)
        self.data, self.length = base.data, base.length
        self.input_length = self.target_length = self.length
        V = self.data.vocab_size
        self.input_vocab, self.num_classes, self.mask_id = V + 1, V, V
        self.n_random = V if self.data.vocab is None else V - 1  # the char vocabulary ends in <unk>
        self.rate = float(task_section.get("mask_rate", 0.15))

    @staticmethod
    def uniform(gen):
        return (gen.next_u64() >> 40) * (1.0 / 16777216.0)  # qkv's uniform_at: 24 random bits

    def corrupt(self, gen, window):
        import numpy as np
        T = self.length
        x, y = np.array(window, dtype=np.int64), np.full(T, self.IGNORE, dtype=np.int64)
        m = min(T, max(1, int(math.floor(self.rate * T + 0.5))))  # std::llround, for rate T >= 0
        order = list(range(T))
        for i in range(m):
            j = i + gen.randint(T - i)
            order[i], order[j] = order[j], order[i]
            p = order[i]
            y[p] = x[p]
            u = self.uniform(gen)
            if u < 0.8:
                x[p] = self.mask_id
            elif u < 0.9:
                x[p] = gen.randint(self.n_random)
        return x, y

    def examples(self, ids, stream, first, count, starts=None):
        import numpy as np
        import qkv_tasks
        xs, ys = [], []
        for r in range(count):
            gen = qkv_tasks.Generator(qkv_tasks.hash64(stream, first + r))
            s = gen.randint(len(ids) - self.length + 1) if starts is None else starts[r]
            x, y = self.corrupt(gen, ids[s:s + self.length])
            xs.append(x)
            ys.append(y)
        return {"inputs": np.stack(xs), "targets": np.stack(ys)}

    def train_examples(self, seed, first, count):
        import qkv_tasks
        return self.examples(self.data.train, qkv_tasks.train_stream(seed), first, count)

    def held_out(self, seed, eval_size, split="val"):
        import qkv_tasks
        ids = self.data.val if split == "val" else self.data.test
        n = min(int(eval_size), len(ids) // self.length)
        stream = qkv_tasks.eval_stream(seed) if split == "val" else qkv_tasks.hash64(seed, 2)
        return self.examples(ids, stream, 0, n, starts=[k * self.length for k in range(n)])


class Twin:
    """The PyTorch model and its training, as qkv trains `cfg` (a resolved config)."""

    def __init__(self, cfg, autocast=False):
        import torch
        import torch.nn as nn
        import qkv_mirror
        import qkv_torch
        self.torch, self.cfg = torch, cfg
        self.autocast = autocast  # forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
        torch.manual_seed(int(cfg.get("seed", 1)))
        if cfg["task"]["name"] == "text":
            import text_corpus
            masked = cfg["task"].get("objective", "causal") == "masked"
            self.task = MaskedText(cfg["task"]) if masked else text_corpus.TextTask(cfg["task"])
            self.masked = masked and cfg["model"].get("arch", "encoder") == "encoder"
            o = qkv_mirror.parse_options(cfg["model"])
            # qkv's context (src/model/task_model.cpp): a decoder's is the task's length; an encoder
            # keeps model.max_len (learned positions up to it) when that is longer.
            o = replace(o, max_len=max(o.max_len, self.task.length) if o.arch == "encoder" else self.task.length)
            sizes = qkv_mirror.Sizes(self.task.input_vocab, self.task.num_classes)
            self.model = qkv_mirror.ARCHS[o.arch](o, sizes)
        else:
            self.model, o, sizes, self.task = qkv_torch.build(cfg)
            self.masked = False
        self.model.train()
        t, opt, self.sched = cfg["train"], cfg["optimizer"], cfg["schedule"]
        self.B, self.steps, self.accumulate = int(t["batch_size"]), int(t["steps"]), int(t.get("accumulate", 1))
        self.label_smoothing, self.clip = float(t.get("label_smoothing", 0.0)), float(opt.get("clip_grad_norm", 1.0))
        self.lr, self.seed = float(opt["lr"]), int(cfg.get("seed", 1))
        self.held_out = self.task.held_out(self.seed, int(cfg["task"]["eval_size"]))
        # qkv's grouping (param_groups_decay_weights_only): Linear and Embedding weights and
        # learned positions decay; biases and LayerNorm gains and shifts do not.
        decay, rest = [], []
        for module in self.model.modules():
            for name, p in module.named_parameters(recurse=False):
                weight = name == "weight" and isinstance(module, (nn.Linear, nn.Embedding, qkv_mirror.LearnedPositions))
                (decay if weight or opt.get("decay_bias_and_norm") else rest).append(p)
        wd = float(opt.get("weight_decay", 0.01))
        groups = [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]
        betas, eps = (float(opt.get("beta1", 0.9)), float(opt.get("beta2", 0.999))), float(opt.get("eps", 1e-8))
        name = opt.get("name", "adamw")
        if name == "adamw":
            self.opt = torch.optim.AdamW(groups, lr=self.lr, betas=betas, eps=eps)
        elif name == "adam":
            self.opt = torch.optim.Adam(groups, lr=self.lr, betas=betas, eps=eps)
        else:
            self.opt = torch.optim.SGD(groups, lr=self.lr, momentum=float(opt.get("momentum", 0.0)),
                                       dampening=float(opt.get("dampening", 0.0)), nesterov=bool(opt.get("nesterov")))
        self.params = list(self.model.parameters())
        self.step_count = 0

    def step(self):
        """One training step (qkv's train_step): the next batch, forward, loss, backward (k
        micro-batches with train.accumulate), clip, update. Returns the loss."""
        torch, F = self.torch, self.torch.nn.functional
        lr = lr_at(self.step_count, self.lr, self.sched, self.steps)
        for g in self.opt.param_groups:
            g["lr"] = lr
        b = self.task.train_examples(self.seed, self.step_count * self.B, self.B)
        x, y = torch.from_numpy(b["inputs"]), torch.from_numpy(b["targets"])
        k, rows, total = self.accumulate, self.B // self.accumulate, 0.0
        for m in range(k):
            xm, ym = x[m * rows:(m + 1) * rows], y[m * rows:(m + 1) * rows].reshape(-1)
            scored = (ym != -100).nonzero().squeeze(1)
            # PyTorch's recipe for bf16 on the CPU: forward and loss under autocast, backward outside.
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
                if self.masked and 0 < len(scored) < len(ym):  # qkv's scored_logits: the masked positions alone
                    logits, ym = self.model(xm, rows=scored), ym[scored]
                else:
                    logits = self.model(xm)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ym,
                                       ignore_index=-100, label_smoothing=self.label_smoothing)
            (loss / k).backward()
            total += loss.item() / k
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step_count += 1
        return total

    def tokens_per_step(self):
        return self.B * self.task.input_length

    def val_loss(self):
        import qkv_torch
        self.model.eval()
        loss = qkv_torch.evaluate(self.model, self.held_out, qkv_torch.eval_batch_size(self.cfg))[0]
        self.model.train()
        return loss


def worker_speed(a):
    import torch
    torch.set_num_threads(a.threads)
    twin = Twin(resolved_config(a.run), autocast=a.autocast)
    for _ in range(a.steps):  # untimed, as qkv's first window
        twin.step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = twin.step()
    secs = time.perf_counter() - t0
    print(json.dumps({"tokens_per_s": a.steps * twin.tokens_per_step() / secs, "loss": loss,
                      "params": sum(p.numel() for p in twin.params), "info": torch_blas()}))


def worker_curve(a):
    import torch
    torch.set_num_threads(a.threads)
    cfg = resolved_config(a.run)
    twin = Twin(cfg)
    every = int(cfg["train"]["eval_every"])
    rows = []
    t0 = time.perf_counter()
    while twin.step_count < twin.steps and time.perf_counter() - t0 < a.seconds:
        twin.step()
        if twin.step_count % every == 0 or twin.step_count == twin.steps:
            rows.append({"elapsed_s": time.perf_counter() - t0, "step": twin.step_count,
                         "tokens": twin.step_count * twin.tokens_per_step(), "val_loss": twin.val_loss()})
    data = getattr(twin.task, "data", None)
    print(json.dumps({"rows": rows, "vocab": getattr(data, "vocab", None), "vocab_size": twin.task.input_vocab,
                      "held_out": len(twin.held_out["inputs"]), "info": torch_blas()}))


def worker_generate(a):
    import torch
    import qkv_mirror
    import qkv_torch
    torch.set_num_threads(a.threads)
    model, _ = qkv_torch.load(a.checkpoint)
    out = []
    qkv_mirror.generate(model, [0], 1, True, lambda r: 0)  # one untimed token: torch's first-call costs
    for job in json.loads(a.jobs):
        for use_cache in (True, False):
            for tokens in (job["tokens"], 1):
                t0 = time.perf_counter()
                ids = model.generate(job["prompt"], tokens, cache=use_cache)
                secs = time.perf_counter() - t0
                out.append({"context": job["context"], "cache": use_cache, "tokens": tokens,
                            "tokens_per_s": tokens / secs, "ids": ids})
    print(json.dumps({"runs": out, "info": torch_blas()}))


def worker_fill(a):
    """In one process, as a user of the twin would: import torch, load the checkpoint, fill the masks
    of one text (one forward pass); the seconds of each part, and the most likely text."""
    t0 = time.perf_counter()
    import torch
    import qkv_torch
    t1 = time.perf_counter()
    torch.set_num_threads(a.threads)
    model, info = qkv_torch.load(a.checkpoint)
    t2 = time.perf_counter()
    job = json.loads(a.jobs)
    forwards = []
    for _ in range(job["repeats"]):
        t3 = time.perf_counter()
        with torch.no_grad():
            logits = model(torch.tensor([job["ids"]]))
        best = logits[0].argmax(-1).tolist()
        forwards.append(time.perf_counter() - t3)
    filled = [best[i] if i in job["masks"] else x for i, x in enumerate(job["ids"])]
    print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "forward_s": forwards, "first_forward_s": forwards[0],
                      "ids": filled, "info": torch_blas()}))


def run_worker(kind, threads, *args, env=None, raw=False):
    """A twin process's JSON answer (its last line); with `raw`, also its whole stdout."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--threads-n", str(threads), *map(str, args)]
    r = subprocess.run(cmd, env={**twin_env(threads), **(env or {})}, capture_output=True, text=True,
                       preexec_fn=pin_to(pinned_cpus(threads)))
    if r.returncode != 0:
        sys.exit(f"bench_lm: the PyTorch twin failed ({' '.join(cmd)}):\n{r.stderr}")
    answer = json.loads(r.stdout.strip().splitlines()[-1])
    return (answer, r.stdout) if raw else answer


# ---- qkv ----

def run_qkv_train(qkv, config, out, threads, sets, seconds=None, extra=()):
    """`qkv train` (`extra`: more arguments); with `seconds`, SIGINT that many seconds after its run
    started (when it wrote metrics.csv: the t0 of its elapsed_s), which saves and exits 130.
    Returns metrics.csv's rows."""
    cmd = [qkv, "train", config, "--out", out, "--threads", str(threads), "--quiet", "--overwrite", *qkv_sets(sets),
           *extra]
    metrics = os.path.join(out, "metrics.csv")
    if os.path.exists(metrics):
        os.remove(metrics)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=qkv_env(),
                         preexec_fn=pin_to(pinned_cpus(threads)))
    if seconds is not None:
        started = None
        while p.poll() is None:
            if started is None and os.path.exists(metrics):
                started = time.monotonic()
            if started is not None and time.monotonic() - started >= seconds:
                p.send_signal(signal.SIGINT)
                break
            time.sleep(0.02)
    stdout, stderr = p.communicate()
    if p.returncode not in (0, 130):
        sys.exit(f"bench_lm: {' '.join(cmd)} failed (exit {p.returncode}):\n{stderr}")
    with open(metrics) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def median(xs):
    return statistics.median(xs) if xs else math.nan


# ---- speed ----

def cmd_speed(a):
    import qkv_torch
    threads = [int(x) for x in a.threads.split(",")]
    N = a.steps
    # 2N steps; qkv's tokens_per_s at the last row covers the last log_every = N steps. The warmup
    # is shortened to fit 2N steps (the learning rate does not change the speed).
    sets = a.set + [f"train.steps={2 * N}", f"train.log_every={N}", f"train.eval_every={2 * N}", f"schedule.warmup_steps={N}",
                    "train.checkpoint_every=1000000000", "train.diagnostics=false", "train.target_accuracy=0"]
    results, info = {n: {"qkv": [], "torch": []} for n in threads}, {}
    capacity = {"before": parallel_capacity(CORE)}
    peaks_before = mfu.measure_peaks(a.kernels, "bench_lm")
    with tempfile.TemporaryDirectory(prefix="bench_lm-") as tmp:
        for r in range(a.rounds):
            for n in threads:
                run = os.path.join(tmp, f"qkv-{n}")
                rows = run_qkv_train(a.qkv, a.config, run, n, sets)
                q = rows[-1]["tokens_per_s"]
                t = run_worker("speed", n, "--run", run, "--steps", N)
                info[n] = t["info"]
                q_tensors = qkv_torch.read_checkpoint(os.path.join(run, "last.h5")).tensors
                q_params = sum(x.size for x in q_tensors.values())
                q_vocab = mfu.output_classes(q_tensors)
                if q_params != t["params"]:
                    sys.exit(f"bench_lm speed: the twin has {t['params']} parameters, qkv's model {q_params}")
                results[n]["qkv"].append(q)
                results[n]["torch"].append(t["tokens_per_s"])
                print(f"  round {r + 1}, {n} thread(s): qkv {q:.0f} tokens/s, twin {t['tokens_per_s']:.0f} tokens/s",
                      file=sys.stderr, flush=True)
        cfg = resolved_config(os.path.join(tmp, f"qkv-{threads[0]}"))
    m, tk = cfg["model"], cfg["task"]
    capacity["after"] = parallel_capacity(CORE)
    peaks_after = mfu.measure_peaks(a.kernels, "bench_lm") if peaks_before else None
    peaks = mfu.merge_peaks(peaks_before[0], peaks_after[0])[0] if peaks_before and peaks_after else None
    print_machine(a.qkv, info[threads[-1]], threads[-1], capacity, threads)
    print(f"\n{a.config}: {m['arch']} C={m['d_model']} H={m['heads']} L={m['layers']} d_ff={m['d_ff']} "
          f"{m['positional']}, task {tk['name']} T={tk['length']}, batch {cfg['train']['batch_size']}; "
          f"{q_params} parameters (both); {2 * N} steps, the last {N} timed; {a.rounds} interleaved rounds, medians")
    count = mfu.config_count(cfg, q_vocab)
    flops = count["per_token"] if count else None
    if peaks:
        print(mfu.peak_line(peaks_before[0], peaks_after[0], peaks_before[1]))
    print("\n| threads | qkv tokens/s | PyTorch twin tokens/s | qkv / twin | per-round range | qkv MFU | twin MFU |")
    print("|---|---|---|---|---|---|---|")
    table = []
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    for n in threads:
        q, t = results[n]["qkv"], results[n]["torch"]
        ratios = [x / y for x, y in zip(q, t)]
        peak = mfu.peak_for(peaks, n) if peaks and flops else None
        row = {"threads": n, "qkv_tokens_per_s": median(q), "torch_tokens_per_s": median(t), "ratio": median(ratios),
               "ratio_range": f"{min(ratios):.2f}-{max(ratios):.2f}", "qkv_rounds": q, "torch_rounds": t,
               "qkv_model_gflops": median(q) * flops / 1e9 if flops else None, "flops_per_token": flops,
               "peak_gflops": peak, "qkv_mfu": mfu.mfu(median(q), flops, peak) if peak else None,
               "torch_mfu": mfu.mfu(median(t), flops, peak) if peak else None}
        table.append(row)
        print(f"| {n} | {median(q):.0f} | {median(t):.0f} | {row['ratio']:.2f} | {row['ratio_range']} | "
              f"{pct(row['qkv_mfu'])} | {pct(row['torch_mfu'])} |")
    if count:
        print(f"model FLOPs per token (tools/mfu.py, PaLM's count): 6 N = {count['parameters'] / 1e6:.3f} M "
              f"(N = {count['N']:.0f} weights in products, the output layer at {100 * mfu.scored_share(tk):.1f}% "
              f"of the positions) + attention 12 L H Q T = {count['attention'] / 1e6:.3f} M = {flops / 1e6:.3f} M")
    if len(threads) > 1:
        for fw in ("qkv", "torch"):
            print(f"{fw}: {threads[-1]} threads / {threads[0]} = "
                  f"{median(results[threads[-1]][fw]) / median(results[threads[0]][fw]):.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "torch_info": info, "cpu": cpu_info()[0], "workload": a.name or a.config,
                       "parallel_capacity": capacity, "fma_peaks": [peaks_before, peaks_after]}, f, indent=1)
    return table


# ---- bf16 ----

def onednn_kernels(text):
    """{"primitive implementation": calls} from the exec lines ONEDNN_VERBOSE=1 prints."""
    seen = {}
    for line in text.splitlines():
        f = line.split(",")
        if len(f) > 5 and f[0] in ("onednn_verbose", "dnnl_verbose") and f[1] == "exec":
            seen[f"{f[3]} {f[4]}"] = seen.get(f"{f[3]} {f[4]}", 0) + 1
    return seen


def kernels_text(seen):
    return ", ".join(f"{k} x{v}" for k, v in sorted(seen.items(), key=lambda kv: -kv[1])) or "none"


def worker_probe(a):
    """Two training steps of the twin (autocast with --autocast), for ONEDNN_VERBOSE's kernel names."""
    import torch
    torch.set_num_threads(a.threads)
    twin = Twin(resolved_config(a.run), autocast=a.autocast)
    for _ in range(2):
        twin.step()
    print(json.dumps({"steps": 2}))


def qkv_kernels(qkv, config, threads, sets, tmp):
    """The oneDNN kernels of two steps of `qkv train` in bf16 (ONEDNN_VERBOSE=1)."""
    run = os.path.join(tmp, "probe")
    cmd = [qkv, "train", config, "--out", run, "--threads", str(threads), "--quiet", "--overwrite", "--strict",
           *qkv_sets(sets + ["train.precision=bf16", "train.steps=2", "train.eval_every=2", "schedule.warmup_steps=1"])]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**qkv_env(), "ONEDNN_VERBOSE": "1"},
                       preexec_fn=pin_to(pinned_cpus(threads)))
    if r.returncode != 0:
        sys.exit(f"bench_lm: {' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return onednn_kernels(r.stdout)


def cmd_bf16(a):
    """qkv in float32 and in bf16 (train.precision: bf16, with --strict: refused where bf16 does
    not pay) against the twin in float32 and under torch.autocast("cpu", dtype=torch.bfloat16):
    interleaved rounds, the order of the four rotated each round, medians of per-round ratios."""
    import qkv_torch
    threads = [int(x) for x in a.threads.split(",")]
    N = a.steps
    sets = a.set + [f"train.steps={2 * N}", f"train.log_every={N}", f"train.eval_every={2 * N}", f"schedule.warmup_steps={N}",
                    "train.checkpoint_every=1000000000", "train.diagnostics=false", "train.target_accuracy=0"]
    kinds = ["qkv fp32", "qkv bf16", "twin fp32", "twin autocast"]
    results, info = {n: {k: [] for k in kinds} for n in threads}, {}
    load = {"before": os.getloadavg()}
    capacity = {"before": parallel_capacity(CORE)}
    fma_before = mfu.measure_peaks(a.kernels, "bench_lm")
    bf16_before = mfu.measure_peaks(a.kernels, "bench_lm", "bf16_gemm_peak")
    with tempfile.TemporaryDirectory(prefix="bench_lm-") as tmp:
        for r in range(a.rounds):
            for n in threads:
                run = os.path.join(tmp, f"qkv-{n}")
                for i in range(len(kinds)):
                    kind = kinds[(i + r) % len(kinds)]
                    if kind.startswith("qkv"):
                        bf16 = kind == "qkv bf16"
                        rows = run_qkv_train(a.qkv, a.config, run + kind[-4:], n,
                                             sets + [f"train.precision={'bf16' if bf16 else 'fp32'}"],
                                             extra=["--strict"] if bf16 else [])
                        rate = rows[-1]["tokens_per_s"]
                    else:
                        if not os.path.exists(os.path.join(run + "fp32", "config.yaml")):
                            run_qkv_train(a.qkv, a.config, run + "fp32", n, sets + ["train.precision=fp32"])
                        t = run_worker("speed", n, "--run", run + "fp32", "--steps", N,
                                       *(["--autocast"] if kind == "twin autocast" else []))
                        info[n], rate = t["info"], t["tokens_per_s"]
                    results[n][kind].append(rate)
                print(f"  round {r + 1}, {n} thread(s): " + ", ".join(f"{k} {results[n][k][-1]:.0f}" for k in kinds)
                      + " tokens/s", file=sys.stderr, flush=True)
        cfg = resolved_config(os.path.join(tmp, f"qkv-{threads[0]}fp32"))
        q_tensors = qkv_torch.read_checkpoint(os.path.join(tmp, f"qkv-{threads[0]}fp32", "last.h5")).tensors
        q_kernels = qkv_kernels(a.qkv, a.config, threads[0], a.set, tmp)
        _, verbose = run_worker("probe", threads[0], "--run", os.path.join(tmp, f"qkv-{threads[0]}fp32"), "--autocast",
                                env={"ONEDNN_VERBOSE": "1"}, raw=True)
        t_kernels = onednn_kernels(verbose)
    capacity["after"] = parallel_capacity(CORE)
    load["after"] = os.getloadavg()
    fma_after = mfu.measure_peaks(a.kernels, "bench_lm") if fma_before else None
    bf16_after = mfu.measure_peaks(a.kernels, "bench_lm", "bf16_gemm_peak") if bf16_before else None
    fma = mfu.merge_peaks(fma_before[0], fma_after[0])[0] if fma_before and fma_after else None
    bf16_peak = mfu.merge_peaks(bf16_before[0], bf16_after[0])[0] if bf16_before and bf16_after else None
    print_machine(a.qkv, info[threads[-1]], threads[-1], capacity, threads)
    print("load average (1, 5, 15 min) before: " + " ".join(f"{x:.2f}" for x in load["before"]) +
          "; after: " + " ".join(f"{x:.2f}" for x in load["after"]))
    bf16_line = subprocess.run([a.qkv, "info"], capture_output=True, text=True, env=qkv_env()).stdout
    print(next((line for line in bf16_line.splitlines() if line.startswith("bf16 products")), "bf16 products: ?"))
    print(f"qkv's oneDNN kernels, 2 bf16 steps (ONEDNN_VERBOSE=1): {kernels_text(q_kernels)}")
    print(f"the twin's oneDNN kernels, 2 autocast steps (ONEDNN_VERBOSE=1): {kernels_text(t_kernels)}")
    m, tk = cfg["model"], cfg["task"]
    print(f"\n{a.config}: {m['arch']} C={m['d_model']} H={m['heads']} L={m['layers']} d_ff={m['d_ff']} "
          f"{m['positional']}, task {tk['name']} T={tk['length']}, batch {cfg['train']['batch_size']}; "
          f"{2 * N} steps, the last {N} timed; {a.rounds} interleaved rounds, medians")
    if fma:
        print(mfu.peak_line(fma_before[0], fma_after[0], fma_before[1]))
    if bf16_peak:
        print(mfu.peak_line(bf16_before[0], bf16_after[0], bf16_before[1],
                            "bf16 peak per CPU (bench_kernels bf16_gemm_peak"))
    count = mfu.config_count(cfg, mfu.output_classes(q_tensors))
    flops = count["per_token"] if count else None
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    print("\n| threads | qkv fp32 | qkv bf16 | twin fp32 | twin autocast | qkv bf16 / qkv fp32 | qkv bf16 / autocast "
          "| autocast / twin fp32 | qkv fp32 MFU (FMA peak) | qkv bf16 MFU (bf16 peak) | autocast MFU (bf16 peak) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    table = []
    for n in threads:
        res = results[n]
        med = {k: median(v) for k, v in res.items()}

        def ratio(x, y):
            rs = [p / q for p, q in zip(res[x], res[y])]
            return median(rs), f"{min(rs):.2f}-{max(rs):.2f}"
        own, twin, twin_gain = ratio("qkv bf16", "qkv fp32"), ratio("qkv bf16", "twin autocast"), ratio("twin autocast", "twin fp32")
        p32 = mfu.peak_for(fma, n) if fma and flops else None
        p16 = mfu.peak_for(bf16_peak, n) if bf16_peak and flops else None
        row = {"threads": n, "tokens_per_s": med, "rounds": res, "bf16_over_fp32": own, "bf16_over_autocast": twin,
               "autocast_over_fp32": twin_gain, "flops_per_token": flops, "fma_peak": p32, "bf16_peak": p16,
               "qkv_fp32_mfu": mfu.mfu(med["qkv fp32"], flops, p32) if p32 else None,
               "qkv_bf16_mfu": mfu.mfu(med["qkv bf16"], flops, p16) if p16 else None,
               "autocast_mfu": mfu.mfu(med["twin autocast"], flops, p16) if p16 else None}
        table.append(row)
        print(f"| {n} | {med['qkv fp32']:.0f} | {med['qkv bf16']:.0f} | {med['twin fp32']:.0f} | {med['twin autocast']:.0f} "
              f"| {own[0]:.2f} ({own[1]}) | {twin[0]:.2f} ({twin[1]}) | {twin_gain[0]:.2f} ({twin_gain[1]}) "
              f"| {pct(row['qkv_fp32_mfu'])} | {pct(row['qkv_bf16_mfu'])} | {pct(row['autocast_mfu'])} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": table, "torch_info": info, "cpu": cpu_info()[0], "workload": a.name or a.config,
                       "parallel_capacity": capacity, "load": load, "fma_peaks": [fma_before, fma_after],
                       "bf16_peaks": [bf16_before, bf16_after], "qkv_kernels": q_kernels, "twin_kernels": t_kernels},
                      f, indent=1)
    return table


# ---- curve ----

def first_time_below(rows, loss):
    for r in rows:
        if r["val_loss"] <= loss:
            return r["elapsed_s"]
    return None


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["elapsed_s", "step", "tokens", "val_loss"])
        w.writeheader()
        for r in rows:
            w.writerow({"elapsed_s": f"{r['elapsed_s']:.3f}", "step": int(r["step"]), "tokens": int(r["tokens"]),
                        "val_loss": f"{r['val_loss']:.6f}"})


def plot(path, curves, title, logx):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, rows in curves:
        ax.plot([r["elapsed_s"] for r in rows], [r["val_loss"] for r in rows], marker="o", markersize=3, label=label)
    if logx:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("wall-clock training time (seconds, evaluations included)")
    ax.set_ylabel("validation loss (nats per token)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cmd_curve(a):
    import qkv_torch
    os.makedirs(a.out, exist_ok=True)
    sets = list(a.set) + ["train.checkpoint_every=1000000000", "train.diagnostics=false", "train.target_accuracy=0"]
    if a.steps:
        sets.append(f"train.steps={a.steps}")
    if a.eval_every:
        sets.append(f"train.eval_every={a.eval_every}")
    run = os.path.join(a.out, "qkv-run")
    capacity = {"before": parallel_capacity(CORE)}
    print(f"qkv: training for {a.seconds:g} s ...", file=sys.stderr, flush=True)
    q_rows = run_qkv_train(a.qkv, a.config, run, a.threads, sets, a.seconds)
    cfg = resolved_config(run)
    B, T = int(cfg["train"]["batch_size"]), int(cfg["task"]["length"])
    qkv_rows = [{"elapsed_s": r["elapsed_s"], "step": r["step"], "tokens": r["step"] * B * T, "val_loss": r["eval_loss"]}
                for r in q_rows if r["elapsed_s"] <= a.seconds]
    print(f"PyTorch twin: training for {a.seconds:g} s ...", file=sys.stderr, flush=True)
    t = run_worker("curve", a.threads, "--run", run, "--seconds", a.seconds)
    torch_rows = t["rows"]
    capacity["after"] = parallel_capacity(CORE)
    write_csv(os.path.join(a.out, "qkv.csv"), qkv_rows)
    write_csv(os.path.join(a.out, "torch.csv"), torch_rows)

    # The same data: the twin's vocabulary and validation windows against qkv's checkpoint and
    # `qkv eval`, and the twin's evaluation of qkv's final model against qkv's own number.
    ckpt = os.path.join(run, "last.h5")
    stored = qkv_torch.read_checkpoint(ckpt)
    q_loss, _, _, q_count = qkv_torch.qkv_eval(a.qkv, ckpt, "--threads", str(a.threads))
    model, info = qkv_torch.load(ckpt)
    m_loss = qkv_torch.evaluate(model, qkv_torch.held_out_set(info), qkv_torch.eval_batch_size(info.config))[0]
    checks = [("vocabulary", t["vocab"] == stored.vocab and t["vocab_size"] == stored.tensors["tok_emb.weight"].shape[0],
               f"twin V {t['vocab_size']}, qkv V {stored.tensors['tok_emb.weight'].shape[0]}"),
              ("validation windows", t["held_out"] == q_count, f"twin {t['held_out']}, qkv eval {q_count}"),
              ("the twin's evaluation of qkv's last.h5", abs(m_loss - q_loss) <= 2e-5,
               f"{m_loss:.6f} vs qkv eval {q_loss:.6f}")]

    name, flags = cpu_info()
    title = (f"{os.path.basename(a.config)}: validation loss against time, {a.seconds:g} s each, {a.threads} thread(s)\n"
             f"{name} ({isa(flags)})")
    plot(os.path.join(a.out, "curve.png"), [("qkv (C++)", qkv_rows), ("PyTorch twin", torch_rows)], title, a.logx)

    print_machine(a.qkv, t["info"], a.threads, capacity, [a.threads])
    m = cfg["model"]
    print(f"\n{a.config}: {m['arch']} C={m['d_model']} H={m['heads']} L={m['layers']} d_ff={m['d_ff']} "
          f"{m['positional']}, T={T}, batch {B}, schedule over {cfg['train']['steps']} steps, eval every "
          f"{cfg['train']['eval_every']} steps on {q_count} windows; {a.seconds:g} s each, {a.threads} thread(s)")
    for what, ok, detail in checks:
        print(f"{'same' if ok else 'DIFFERENT'}: {what} ({detail})")
    losses = [float(x) for x in a.losses.split(",") if x]
    fmt = lambda x: "-" if x is None else f"{x:.1f} s"  # noqa: E731
    print("\n| | qkv | PyTorch twin |")
    print("|---|---|---|")
    summary = {}
    for label, rows in (("qkv", qkv_rows), ("torch", torch_rows)):
        last = rows[-1] if rows else None
        summary[label] = {
            "evaluations": len(rows), "steps": int(last["step"]) if last else 0,
            "final_val_loss": last["val_loss"] if last else math.nan,
            "best_val_loss": min(r["val_loss"] for r in rows) if rows else math.nan,
            "tokens_per_s": last["tokens"] / last["elapsed_s"] if last else math.nan,
            "time_to": {str(x): first_time_below(rows, x) for x in losses}}
    q, tw = summary["qkv"], summary["torch"]
    print(f"| steps in {a.seconds:g} s (last evaluation) | {q['steps']} | {tw['steps']} |")
    print(f"| validation loss at the last evaluation | {q['final_val_loss']:.4f} | {tw['final_val_loss']:.4f} |")
    print(f"| best validation loss | {q['best_val_loss']:.4f} | {tw['best_val_loss']:.4f} |")
    for x in losses:
        print(f"| time to validation loss <= {x:g} | {fmt(q['time_to'][str(x)])} | {fmt(tw['time_to'][str(x)])} |")
    print(f"| tokens/s (training and evaluations) | {q['tokens_per_s']:.0f} | {tw['tokens_per_s']:.0f} |")
    print(f"\nwrote {a.out}/qkv.csv, {a.out}/torch.csv, {a.out}/curve.png")
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump({"summary": summary, "checks": checks, "cpu": name, "isa": isa(flags), "threads": a.threads,
                   "parallel_capacity": capacity,
                   "seconds": a.seconds, "torch_info": t["info"]}, f, indent=1)
    return summary, checks


# ---- generate ----

def qkv_generate(qkv, ckpt, prompt, tokens, threads, cache):
    cmd = [qkv, "generate", ckpt, "--ids", "--prompt", " ".join(map(str, prompt)), "--temperature", "0",
           "--max-tokens", str(tokens), "--threads", str(threads)] + ([] if cache else ["--no-cache"])
    r = subprocess.run(cmd, capture_output=True, text=True, env=qkv_env(), preexec_fn=pin_to(pinned_cpus(threads)))
    m = re.search(r"([0-9.]+) tokens/s", r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"bench_lm: {' '.join(cmd[:3])} ... failed (exit {r.returncode}):\n{r.stderr}")
    return float(m.group(1)), [int(x) for x in r.stdout.split()][len(prompt):]


def cmd_generate(a):
    import qkv_torch
    threads = [int(x) for x in a.threads.split(",")]
    stored = qkv_torch.read_checkpoint(a.checkpoint)
    model, info = qkv_torch.load(a.checkpoint)
    if info.arch != "decoder":
        sys.exit(f"bench_lm generate: {a.checkpoint} is an {info.arch} model; generation needs model.arch decoder")
    C, V = model.max_len, stored.tensors["tok_emb.weight"].shape[0]
    jobs = []
    for c in (int(x) for x in a.contexts.split(",")):
        plen = max(1, c - 1)
        if plen + a.tokens > C:
            print(f"note: context {c} skipped: a {plen}-token prompt and {a.tokens} new tokens exceed the model's "
                  f"context {C} (the window would jump)", file=sys.stderr)
            continue
        prompt = [(7 * i + 3) % max(V - 1, 1) for i in range(plen)]  # any ids but <unk>: speed does not depend on them
        jobs.append({"context": c, "prompt": prompt, "tokens": a.tokens})
    if not jobs:
        sys.exit("bench_lm generate: no context fits the model")
    # res[(context, threads, framework, cache, new tokens)] = [tokens/s per round]; the 1-token runs
    # time the prefill (and one token), subtracted for the decoding rate.
    res, info_t, same = {}, {}, True
    capacity = {"before": parallel_capacity(CORE)}
    for r in range(a.rounds):
        for n in threads:
            for job in jobs:
                for cache in (True, False):
                    for tokens in (job["tokens"], 1):
                        tps, ids = qkv_generate(a.qkv, a.checkpoint, job["prompt"], tokens, n, cache)
                        res.setdefault((job["context"], n, "qkv", cache, tokens), []).append(tps)
                        same = same and res.setdefault(("ids", job["context"], tokens), ids) == ids
            t = run_worker("generate", n, "--checkpoint", a.checkpoint, "--jobs", json.dumps(jobs))
            info_t[n] = t["info"]
            for run in t["runs"]:
                res.setdefault((run["context"], n, "torch", run["cache"], run["tokens"]), []).append(run["tokens_per_s"])
                same = same and run["ids"] == res[("ids", run["context"], run["tokens"])]
            print(f"  round {r + 1}, {n} thread(s) done", file=sys.stderr, flush=True)
    capacity["after"] = parallel_capacity(CORE)
    print_machine(a.qkv, info_t[threads[-1]], threads[-1], capacity, threads)
    print(f"\n{a.checkpoint}: context {C}, V {V}; greedy, N = {a.tokens} new tokens (and 1) after a prompt of "
          f"max(1, context - 1) tokens; {a.rounds} rounds, medians; the twin's tokens "
          f"{'equal' if same else 'DIFFER from'} qkv's")
    N = a.tokens

    def rate(c, n, fw, cache, decode_only):
        """Median tokens/s over the rounds: N / time(N), or decoding alone, (N - 1) / (time(N) -
        time(1)), NaN when that difference is under a fifth of time(N) (not resolved: raise --tokens)."""
        runs = zip(res[(c, n, fw, cache, N)], res[(c, n, fw, cache, 1)])
        if not decode_only:
            return median([full for full, _ in runs])
        diffs = [(N / full, N / full - 1 / one) for full, one in runs]
        return median([(N - 1) / d if d > 0.2 * t else math.nan for t, d in diffs])
    rows = []
    for decode_only in (False, True):
        print("\ndecoding alone: (N - 1) / (time of N tokens - time of 1 token)" if decode_only else
              "\nas qkv generate reports: N / time, the prompt's prefill included")
        print("| context | threads | qkv KV cache | twin KV cache | qkv / twin | qkv no cache | twin no cache | "
              "qkv / twin | cache speed-up qkv / twin |")
        print("|---|---|---|---|---|---|---|---|---|")
        for job in jobs:
            c = job["context"]
            for n in threads:
                qc, tc, qn, tn = (rate(c, n, fw, cache, decode_only) for fw, cache in
                                  (("qkv", True), ("torch", True), ("qkv", False), ("torch", False)))
                rows.append({"context": c, "threads": n, "decode_only": decode_only, "qkv_cache": qc, "torch_cache": tc,
                             "qkv_no_cache": qn, "torch_no_cache": tn})
                f = lambda x, d=0: "-" if math.isnan(x) else f"{x:.{d}f}"  # noqa: E731
                print(f"| {c} | {n} | {f(qc)} | {f(tc)} | {f(qc / tc, 2)} | {f(qn)} | {f(tn)} | {f(qn / tn, 2)} | "
                      f"{f(qc / qn, 1)} / {f(tc / tn, 1)} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "same_tokens": same, "torch_info": info_t, "cpu": cpu_info()[0],
                       "parallel_capacity": capacity}, f, indent=1)
    return rows, same


# ---- fill ----

def fill_text(vocab, length, every=7):
    """A text of `length` characters of the vocabulary (printable, not blank; any will do: the cost
    does not depend on them) with [MASK] at every `every`-th position: (text, ids, mask positions)."""
    chars = [i for i, c in enumerate(vocab) if chr(c).isprintable() and not chr(c).isspace() and chr(c) not in "[]"]
    ids = [chars[(7 * i + 3) % len(chars)] for i in range(length)]
    masks = list(range(every // 2, length, every))
    text = "".join("[MASK]" if i in masks else chr(vocab[x]) for i, x in enumerate(ids))
    return text, ids, masks


def cmd_fill(a):
    import qkv_torch
    threads = [int(x) for x in a.threads.split(",")]
    stored = qkv_torch.read_checkpoint(a.checkpoint)
    cfg = yaml_config(stored.config_text)
    if cfg["task"].get("objective") != "masked" or not stored.vocab:
        sys.exit(f"bench_lm fill: {a.checkpoint} is not a masked character model (task.objective masked, task.tokenizer char)")
    text, ids, masks = fill_text(stored.vocab, a.length)
    mask_id = len(stored.vocab) + 1  # [MASK] = V, the vocabulary plus <unk>
    x = [mask_id if i in masks else t for i, t in enumerate(ids)]
    res, same = {}, True
    capacity = {"before": parallel_capacity(CORE)}
    for r in range(a.rounds):
        for n in threads:
            cmd = [a.qkv, "fill", a.checkpoint, "--text", text, "--threads", str(n)]
            t0 = time.perf_counter()
            q = subprocess.run(cmd, capture_output=True, text=True, env=qkv_env(), preexec_fn=pin_to(pinned_cpus(n)))
            wall = time.perf_counter() - t0
            if q.returncode != 0:
                sys.exit(f"bench_lm fill: {' '.join(cmd[:3])} ... failed (exit {q.returncode}):\n{q.stderr}")
            best = re.search(r"^most likely: (.*)$", q.stdout, re.M).group(1).replace("\u2420", " ")  # qkv shows a space as ␠
            t0 = time.perf_counter()
            t = run_worker("fill", n, "--checkpoint", a.checkpoint,
                           "--jobs", json.dumps({"ids": x, "masks": masks, "repeats": a.repeats}))
            t_wall = time.perf_counter() - t0
            twin_best = "".join(chr(stored.vocab[i]) if i < len(stored.vocab) else "?" for i in t["ids"])
            same = same and twin_best == best
            for key, value in (("qkv", wall), ("twin", t_wall), ("twin_import", t["import_s"]),
                               ("twin_load", t["load_s"]), ("twin_first_forward", t["first_forward_s"]),
                               ("twin_forward", median(t["forward_s"][1:] or t["forward_s"]))):
                res.setdefault((n, key), []).append(value)
            info = t["info"]
        print(f"  round {r + 1} done", file=sys.stderr, flush=True)
    capacity["after"] = parallel_capacity(CORE)
    print_machine(a.qkv, info, threads[-1], capacity, threads)
    print(f"\n{a.checkpoint}: {cfg['model']['arch']} C={cfg['model']['d_model']} L={cfg['model']['layers']}, a text of "
          f"{a.length} characters with {len(masks)} masks; {a.rounds} rounds, medians (ms); the twin's most likely text "
          f"{'equals' if same else 'DIFFERS from'} qkv's")
    print("\n| threads | qkv fill (process) | twin (process) | twin: import torch | twin: load | twin: first forward | "
          "twin: forward |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for n in threads:
        row = {k: 1e3 * median(res[(n, k)]) for k in ("qkv", "twin", "twin_import", "twin_load", "twin_first_forward",
                                                      "twin_forward")}
        rows.append({"threads": n, **row})
        print(f"| {n} | {row['qkv']:.0f} | {row['twin']:.0f} | {row['twin_import']:.0f} | {row['twin_load']:.0f} | "
              f"{row['twin_first_forward']:.1f} | {row['twin_forward']:.1f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "same_fills": same, "text": text, "cpu": cpu_info()[0]}, f, indent=1)
    return rows, same


def yaml_config(text):
    import yaml
    return yaml.safe_load(text)


# ---- selftest ----

def make_corpus(path, chars, seed=0):
    """A corpus with some structure to learn: sentences from a small grammar."""
    import random
    rng = random.Random(seed)
    nouns = "cat dog bird fish child teacher river city garden machine".split()
    verbs = "sees likes finds follows builds paints opens reads".split()
    adjs = "small red quiet old bright happy slow".split()
    out, n = [], 0
    while n < chars:
        s = f"the {rng.choice(adjs)} {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)}.\n"
        out.append(s)
        n += len(s)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("".join(out))
    return path


def write_config(path, corpus, **over):
    import yaml
    cfg = {"seed": 1,
           "model": {"arch": "decoder", "d_model": 32, "heads": 2, "layers": 2, "d_ff": 64, "positional": "learned"},
           "task": {"name": "text", "path": corpus, "tokenizer": "char", "length": 32, "eval_size": 16},
           "optimizer": {"name": "adamw", "lr": 0.003, "weight_decay": 0.1, "clip_grad_norm": 1.0},
           "schedule": {"name": "cosine", "warmup_steps": 10, "min_lr": 0.0003},
           "train": {"steps": 100, "batch_size": 16, "eval_every": 10, "checkpoint_every": 1000, "log_every": 10},
           "run": {"out": os.path.join(os.path.dirname(path), "run")}}
    for key, value in over.items():
        section, name = key.split("__")
        cfg[section][name] = value
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def cmd_selftest(a):
    d = a.dir or tempfile.mkdtemp(prefix="bench_lm-selftest-")
    corpus = make_corpus(os.path.join(d, "corpus", "text.txt"), 40000)
    problems = []

    def expect(ok, what):
        print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)
        if not ok:
            problems.append(what)

    cfg = write_config(os.path.join(d, "tiny.yaml"), corpus)
    ns = argparse.Namespace(qkv=a.qkv, config=cfg, threads="1,2", steps=3, rounds=1, set=[], json=os.path.join(d, "speed.json"),
                            kernels=mfu.DEFAULT_KERNELS, name="tiny")
    print("== speed (3 + 3 steps, 1 round)")
    table = cmd_speed(ns)
    expect(all(r["qkv_tokens_per_s"] > 0 and r["torch_tokens_per_s"] > 0 for r in table), "speed: positive tokens/s")

    print("\n== bf16 (3 + 3 steps, 1 round; where this CPU's bf16 products pay)")
    if "bf16 products: not used" in subprocess.run([a.qkv, "info"], capture_output=True, text=True).stdout:
        print("skipped: qkv info says bf16 products are not used here")
    else:
        ns = argparse.Namespace(qkv=a.qkv, config=cfg, threads="1", steps=3, rounds=1, set=[], json=os.path.join(d, "bf16.json"),
                                kernels=mfu.DEFAULT_KERNELS, name="tiny")
        table = cmd_bf16(ns)
        expect(all(x > 0 for r in table for x in r["tokens_per_s"].values()), "bf16: positive tokens/s, all four runs")

    print("\n== curve (15 s each)")
    ns = argparse.Namespace(qkv=a.qkv, config=cfg, seconds=15.0, out=os.path.join(d, "curve"), threads=2, steps=0,
                            eval_every=0, losses="2.5,2.0,1.5", logx=False, set=[])
    summary, checks = cmd_curve(ns)
    expect(all(ok for _, ok, _ in checks), "curve: same vocabulary, validation windows and evaluation as qkv")
    for fw in ("qkv", "torch"):
        with open(os.path.join(ns.out, f"{fw}.csv")) as f:
            rows = list(csv.DictReader(f))
        losses = [float(r["val_loss"]) for r in rows]
        expect(len(rows) >= 2 and losses[-1] < losses[0] and all(float(r["elapsed_s"]) <= 15.0 for r in rows),
               f"curve: {fw}.csv has {len(rows)} evaluations within 15 s, loss falling {losses[0]:.3f} -> {losses[-1]:.3f}")
    expect(os.path.getsize(os.path.join(ns.out, "curve.png")) > 10000, "curve: curve.png written")

    print("\n== generate (a width-64 decoder with context 600, 2 training steps)")
    gen_cfg = write_config(os.path.join(d, "ctx600.yaml"), corpus, model__d_model=64, model__heads=4, task__length=600,
                           task__eval_size=2, train__steps=2, train__batch_size=2, train__eval_every=2,
                           schedule__warmup_steps=1)
    run = os.path.join(d, "ctx600")
    run_qkv_train(a.qkv, gen_cfg, run, 2, [])
    ns = argparse.Namespace(qkv=a.qkv, checkpoint=os.path.join(run, "last.h5"), threads="1,2", contexts="1,512",
                            tokens=16, rounds=1, json=os.path.join(d, "generate.json"))
    rows, same = cmd_generate(ns)
    expect(len(rows) == 8 and all(r[k] > 0 for r in rows if not r["decode_only"] for k in r if k.startswith(("qkv", "torch"))),
           "generate: 2 contexts x 2 thread counts, positive tokens/s")
    expect(same, "generate: the twin's greedy tokens equal qkv's (with and without the caches)")
    print(f"\n{len(problems)} problem(s); outputs in {d}")
    return 1 if problems else 0


# ---- command line ----

def main(argv=None):
    ap = argparse.ArgumentParser(prog="bench_lm.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--worker", choices=["speed", "curve", "generate", "fill", "probe"], help=argparse.SUPPRESS)
    ap.add_argument("--threads-n", type=int, dest="threads_n", help=argparse.SUPPRESS)
    default_qkv = os.environ.get("QKV", os.path.join(REPO, "build", "qkv"))
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--worker":  # a twin process (its environment set by run_worker)
        w = argparse.ArgumentParser()
        w.add_argument("--worker")
        w.add_argument("--threads-n", type=int, dest="threads")
        w.add_argument("--run")
        w.add_argument("--steps", type=int)
        w.add_argument("--seconds", type=float)
        w.add_argument("--checkpoint")
        w.add_argument("--jobs")
        w.add_argument("--autocast", action="store_true")
        a = w.parse_args(argv)
        return {"speed": worker_speed, "curve": worker_curve, "generate": worker_generate, "fill": worker_fill,
                "probe": worker_probe}[a.worker](a)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("speed", help="training tokens/s, qkv and the twin, 1 and 2 threads")
    p.add_argument("config")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=20, help="timed steps N (after N untimed ones)")
    p.add_argument("--rounds", type=int, default=3)
    p.set_defaults(run=cmd_speed)
    p = sub.add_parser("bf16", help="qkv fp32 and bf16 against the twin in fp32 and under autocast bf16")
    p.add_argument("config")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=20, help="timed steps N (after N untimed ones)")
    p.add_argument("--rounds", type=int, default=3)
    p.set_defaults(run=cmd_bf16)
    p = sub.add_parser("curve", help="validation loss against wall-clock time, the same budget each")
    p.add_argument("config")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every K steps (default: train.eval_every)")
    p.add_argument("--steps", type=int, default=0, help="train.steps, the schedule's length (default: the config's)")
    p.add_argument("--losses", default="2.5,2.0,1.9,1.81", help="report the time to reach these validation losses")
    p.add_argument("--logx", action="store_true")
    p.set_defaults(run=cmd_curve)
    p = sub.add_parser("generate", help="generation tokens/s with and without the KV cache")
    p.add_argument("checkpoint")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--contexts", default="1,512")
    p.add_argument("--tokens", type=int, default=64, help="new tokens per generation")
    p.add_argument("--rounds", type=int, default=3)
    p.set_defaults(run=cmd_generate)
    p = sub.add_parser("fill", help="qkv fill's latency on one text against the twin's")
    p.add_argument("checkpoint")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--length", type=int, default=64, help="characters of the text (default 64)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5, help="forward passes the twin times in its process")
    p.set_defaults(run=cmd_fill)
    p = sub.add_parser("selftest", help="every command with tiny settings on a generated corpus")
    p.add_argument("--dir", help="where to write (default: a new directory under /tmp)")
    p.set_defaults(run=cmd_selftest)
    for p in sub.choices.values():
        p.add_argument("--qkv", default=default_qkv, help="the qkv binary (default: $QKV, else build/qkv)")
        if p.get_default("run") in (cmd_speed, cmd_bf16, cmd_curve):
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="a config override for both (qkv train --set)")
        if p.get_default("run") in (cmd_speed, cmd_bf16, cmd_generate, cmd_fill):
            p.add_argument("--json", help="also write the measurements here")
        if p.get_default("run") in (cmd_speed, cmd_bf16):
            p.add_argument("--kernels", default=mfu.DEFAULT_KERNELS,
                           help="bench_kernels, for the FMA peak of MFU (default: make bench's); without it no MFU")
            p.add_argument("--name", default="", help="the workload's name in --json (tools/mfu.py table)")
        if p.get_default("run") in (cmd_speed, cmd_bf16, cmd_curve, cmd_generate, cmd_fill):
            p.add_argument("--malloc", choices=["reuse", "default"], default="reuse",
                           help="glibc malloc of every process: reuse freed memory (default) or glibc's defaults")
    a = ap.parse_args(argv)
    if report_missing(torch_missing("bench_lm"),
                      executable_missing("bench_lm", a.qkv, "the qkv binary", "make build (or pass --qkv)")):
        return 2
    global MALLOC
    MALLOC = getattr(a, "malloc", MALLOC)
    r = a.run(a)
    return r if isinstance(r, int) else 0


if __name__ == "__main__":
    sys.exit(main())
