#!/usr/bin/python3
"""The held-out examples qkv evaluates on, generated in Python exactly as qkv generates them.

A twin of include/qkv/tensor/random.hpp (hash64, Generator.randint) and src/data/tasks.cpp (the
tasks), so that a PyTorch model can be scored on the very examples `qkv eval` scores
(scripts/pytorch/qkv_torch.py check). Example k of stream s is drawn from Generator(hash64(s, k)) alone;
the held-out set is examples 0 .. eval_size-1 of stream hash64(seed, 1), the training stream is
hash64(seed, 0).

    import qkv_tasks
    task = qkv_tasks.make_task(cfg["task"])                  # the config's task section (a dict)
    batch = task.examples(qkv_tasks.eval_stream(seed), 0, n)  # dict of int64 arrays
    batch = task.held_out(seed, n)                            # the same; task.train_examples(seed, first, n)
                                                              # (scripts/pytorch/text_corpus.py: the text task)

    /usr/bin/python3 scripts/pytorch/qkv_tasks.py sort --vocab 8 --length 6 --seed 1 --count 2

batch["inputs"] (N, T), batch["targets"] (N, Tt) with IGNORE (-100) where not scored, and for
sequence-to-sequence tasks batch["decoder_inputs"] (N, Tt) = BOS then targets[:-1] (seq2seq_recall: the
queries, given, with no BOS: bos -1).
tests/torch/test_bridge.py checks the inputs against the tokens `qkv logits` prints and the
losses against `qkv eval`.
"""
import argparse
import sys

import numpy as np

MASK64 = (1 << 64) - 1
IGNORE = -100  # data::kIgnore
TASKS = ("copy", "reverse", "sort", "recall", "seq2seq_reverse", "seq2seq_sort", "seq2seq_recall")  # data::task_names()
DEFAULTS = {"name": "sort", "vocab": 16, "length": 32, "pairs": 8, "queries": 0, "eval_size": 512}


def hash64(seed, counter):
    """SplitMix64 finaliser of (seed, counter), as qkv::hash64 (all arithmetic mod 2^64)."""
    z = (seed * 0x9E3779B97F4A7C15 + counter * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class Generator:
    """qkv::Generator: draw i is hash64(seed, offset + i)."""

    def __init__(self, seed):
        self.seed, self.offset = seed, 0

    def next_u64(self):
        self.offset += 1
        return hash64(self.seed, self.offset - 1)

    def randint(self, n):
        return self.next_u64() % n


def eval_stream(seed):
    return hash64(seed, 1)


def train_stream(seed):
    return hash64(seed, 0)


class Task:
    """Sizes as qkv's data::Task; fill(gen) -> (input, target) lists for one example."""

    def __init__(self, o):
        self.name, self.vocab, self.length = o["name"], int(o["vocab"]), int(o["length"])
        self.pairs = int(o["pairs"])
        self.queries = int(o["queries"]) or self.pairs
        self.seq2seq = self.name.startswith("seq2seq_")
        recall = self.name in ("recall", "seq2seq_recall")
        self.input_vocab = 2 * self.vocab if recall else self.vocab
        self.num_classes = self.vocab
        self.input_length = 2 * self.pairs + self.queries if self.name == "recall" else self.length
        self.target_length = self.input_length
        self.target_vocab = self.vocab + 1 if self.seq2seq else 0
        self.bos = self.vocab if self.seq2seq else -1
        if self.name == "seq2seq_recall":  # pairs to the encoder, queries the decoder's given inputs
            self.input_length, self.target_length, self.target_vocab, self.bos = 2 * self.pairs, self.queries, self.vocab, -1

    def fill(self, gen):
        """(input, target) lists, or (input, target, decoder input) for seq2seq_recall."""
        if self.name == "recall":
            return self.fill_recall(gen)
        if self.name == "seq2seq_recall":
            x, y = self.fill_recall(gen, 2 * self.pairs + self.queries)
            P2 = 2 * self.pairs
            return x[:P2], y[P2:], x[P2:]
        x = [gen.randint(self.vocab) for _ in range(self.length)]
        kind = self.name.replace("seq2seq_", "")
        y = sorted(x) if kind == "sort" else x[::-1] if kind == "reverse" else list(x)
        return x, y

    def fill_recall(self, gen, length=None):
        # Distinct keys: the first `pairs` entries of a partial Fisher-Yates shuffle of [0, V).
        V, P, n = self.vocab, self.pairs, length or self.input_length
        keys, values = list(range(V)), []
        x, y = [0] * n, [IGNORE] * n
        for i in range(P):
            j = i + gen.randint(V - i)
            keys[i], keys[j] = keys[j], keys[i]
            values.append(V + gen.randint(V))
            x[2 * i], x[2 * i + 1] = keys[i], values[i]
        for q in range(self.queries):
            i = gen.randint(P)
            x[2 * P + q], y[2 * P + q] = keys[i], values[i] - V
        return x, y

    def held_out(self, seed, count):
        """The held-out set qkv eval scores: the first `count` examples of the eval stream."""
        return self.examples(eval_stream(seed), 0, count)

    def train_examples(self, seed, first, count):
        """Training examples first .. first+count-1, as qkv's Dataset draws them (train_size 0)."""
        return self.examples(train_stream(seed), first, count)

    def examples(self, stream, first, count):
        """Examples first .. first+count-1 of `stream`, as qkv's Task::examples."""
        rows = [self.fill(Generator(hash64(stream, first + r))) for r in range(count)]
        batch = {"inputs": np.array([r[0] for r in rows], dtype=np.int64).reshape(count, self.input_length),
                 "targets": np.array([r[1] for r in rows], dtype=np.int64).reshape(count, self.target_length)}
        if self.name == "seq2seq_recall":
            batch["decoder_inputs"] = np.array([r[2] for r in rows], dtype=np.int64).reshape(count, self.target_length)
        elif self.seq2seq:  # teacher forcing: BOS then the target shifted right
            dec = np.full_like(batch["targets"], self.bos)
            dec[:, 1:] = batch["targets"][:, :-1]
            batch["decoder_inputs"] = dec
        return batch


def make_task(options):
    """The task of a config's `task` section (missing keys take qkv's defaults). ValueError for a
    task this twin does not know (e.g. one added to qkv later)."""
    o = dict(DEFAULTS, **(options or {}))
    if o["name"] not in TASKS:
        raise ValueError(f"task '{o['name']}' has no Python twin in scripts/pytorch/qkv_tasks.py (known: {', '.join(TASKS)})")
    return Task(o)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Print qkv's held-out examples of a task.")
    ap.add_argument("name", choices=TASKS)
    for key in ("vocab", "length", "pairs", "queries"):
        ap.add_argument(f"--{key}", type=int, default=DEFAULTS[key])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=4)
    a = ap.parse_args(argv)
    task = make_task({k: getattr(a, k) for k in ("name", "vocab", "length", "pairs", "queries")})
    b = task.examples(eval_stream(a.seed), 0, a.count)
    for i in range(a.count):
        print("input ", " ".join(map(str, b["inputs"][i])))
        print("target", " ".join(map(str, b["targets"][i])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
