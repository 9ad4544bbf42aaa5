#!/usr/bin/python3
"""A text corpus read exactly as qkv's text task reads it (docs/text.md, src/data/text.cpp,
src/data/next_token.cpp), for a PyTorch model that trains and evaluates on qkv's data.

    import text_corpus
    data = text_corpus.load(cfg["task"])            # the config's task section (a dict)
    data.vocab_size, data.train, data.val, data.test # V; int64 arrays of ids
    task = text_corpus.TextTask(cfg["task"])         # windows, as qkv's data::Text
    task.held_out(seed, eval_size)                   # the validation windows qkv eval scores
    task.train_examples(seed, first, count)          # qkv's training windows first .. first+count-1

    /usr/bin/python3 scripts/pytorch/text_corpus.py PATH [--tokenizer char] [--length 128] [--eval-size 256]

The rules, in order: the files (a file; a directory walked recursively, skipping hidden names,
symbolic links, non-regular files and *.dat; a glob pattern with {a,b} braces, each match a file
or a directory) sorted by path in byte order; files holding a NUL byte skipped; with the char
tokenizer every file strict UTF-8 as stored; cleaning (auto: the files that need it; ANSI escapes,
then fortune '%' separator lines emptied); each file's text followed by '\\n' unless it ends in
one, empty files left out; tokens = code points (char) or bytes (byte); split by position,
n_val = floor(n val_fraction + n 1e-12), likewise n_test, train | validation | test; the char
vocabulary = the sorted code points of the training split, then <unk> (id V - 1) for characters
of the other splits that training never saw.

Windows (length T): training windows of T + 1 tokens start at gen.randint(n_train - T) with
example k drawn from Generator(hash64(hash64(seed, 0), k)) (qkv_tasks); validation window k starts
at k T, and the held-out set is the first min(eval_size, (n_val - 1) // T) of them.
"""
import argparse
import glob
import os
import re
import stat
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qkv_tasks  # noqa: E402

DEFAULTS = {"path": "", "tokenizer": "char", "clean": "auto", "val_fraction": 0.05, "test_fraction": 0.05,
            "length": 32, "eval_size": 512}


class CorpusError(ValueError):
    """The corpus cannot be read as qkv reads it (qkv says the same thing, worded its way)."""


# ---- which files ----

def expand_braces(pattern):
    """glob(3)'s GLOB_BRACE: "a{b,c{d,e}}f" -> ["abf", "acdf", "acef"] (first brace group first)."""
    depth, start = 0, -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                body, parts, level, last = pattern[start + 1:i], [], 0, 0
                for j, c in enumerate(body):
                    level += (c == "{") - (c == "}")
                    if c == "," and level == 0:
                        parts.append(body[last:j])
                        last = j + 1
                parts.append(body[last:])
                return [x for p in parts for x in expand_braces(pattern[:start] + p + pattern[i + 1:])]
    return [pattern]


def walk(directory, found):
    """Every regular file below `directory`: hidden names (and what is below them), symbolic links,
    non-regular files and *.dat skipped."""
    for root, dirs, files in os.walk(directory, followlinks=False):
        kept = []
        for name in sorted(dirs):
            p = os.path.join(root, name)
            if name.startswith(".") or os.path.islink(p):
                continue  # hidden, or a link to a directory: not followed
            kept.append(name)
        dirs[:] = kept
        for name in files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if name.startswith(".") or stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode) or name.endswith(".dat"):
                continue
            found.append(p)


def text_files(path):
    """[(path, bytes)] of the corpus's text files, sorted by path (bytes), each once; files holding
    a NUL byte (binary) are skipped, and a file named directly that holds one is an error."""
    if not path:
        raise CorpusError("task.path: expected a file, a directory or a glob pattern, found an empty string")
    found = []
    if os.path.exists(path):  # named literally: a link to it is followed
        if os.path.isdir(path):
            walk(path, found)
        elif os.path.isfile(path):
            found.append(path)
        else:
            raise CorpusError(f"task.path: {path} is neither a regular file nor a directory")
    elif not any(c in path for c in "*?[{"):
        raise CorpusError(f"task.path: no such file or directory: {path}")
    else:
        matches = sorted({m for p in expand_braces(path) for m in glob.glob(p)})
        if not matches:
            raise CorpusError(f"task.path: {path} matches no files")
        for m in matches:
            st = os.lstat(m)
            if stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                walk(m, found)
            elif stat.S_ISREG(st.st_mode) and not m.endswith(".dat"):
                found.append(m)
    out = []
    for p in sorted(set(found), key=os.fsencode):
        with open(p, "rb") as f:
            data = f.read()
        if b"\0" not in data:
            out.append((p, data))
        elif p == path:
            raise CorpusError(f"task.path: {path} is not a text file (NUL byte at byte {data.index(0)})")
    if not out:
        raise CorpusError(f"task.path: {path} holds no text files")
    return out


def corpus_files(path):
    """The corpus's files, as qkv's corpus_files."""
    return [p for p, _ in text_files(path)]


# ---- cleaning ----

ESCAPE = re.compile(rb"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?|[\x20-\x2f]*[\x30-\x7e]?)")
SEPARATOR = re.compile(rb"^%[ \t\r]*$", re.M)


def clean_text(data):
    """qkv's clean_text on bytes: ANSI escape sequences removed (CSI: ESC [ params intermediates
    final; others: ESC intermediates final; a sequence cut short loses what it matched), then each
    line that is '%' and only spaces, tabs, '\\r' emptied (its '\\n' stays)."""
    return SEPARATOR.sub(b"", ESCAPE.sub(b"", data))


def needs_cleaning(data):
    return clean_text(data) != data


# ---- reading, tokenizing, splitting ----

class TextData:
    """files (those holding text), text (bytes), vocab (code points of the char vocabulary, <unk>
    not included; None for bytes), vocab_size, train / val / test (int64 id arrays)."""

    def __init__(self, files, text, vocab, splits):
        self.files, self.text, self.vocab = files, text, vocab
        self.vocab_size = 256 if vocab is None else len(vocab) + 1
        self.train, self.val, self.test = splits

    def decode(self, ids):
        if self.vocab is None:
            return bytes(int(i) for i in ids).decode("utf-8", "replace")
        return "".join(chr(self.vocab[i]) if i < len(self.vocab) else "\ufffd" for i in ids)

    def encode(self, text):
        """A prompt's ids (char: every character must be in the vocabulary, as qkv generate)."""
        if self.vocab is None:
            return list(text.encode("utf-8"))
        index = {c: i for i, c in enumerate(self.vocab)}
        unknown = sorted({ch for ch in text if ord(ch) not in index})
        if unknown:
            raise CorpusError(f"prompt: characters not in the vocabulary: {unknown}")
        return [index[ord(ch)] for ch in text]


def split_sizes(n, val_fraction, test_fraction):
    """(n_train, n_val, n_test) as qkv's split_text."""
    import math
    n_val = math.floor(n * val_fraction + n * 1e-12)
    n_test = math.floor(n * test_fraction + n * 1e-12)
    return n - n_val - n_test, n_val, n_test


def load(task_section, vocab=None):
    """The corpus of a config's task section, read, cleaned, tokenized and split as qkv does;
    `vocab` (code points, e.g. a checkpoint's /data/vocab) replaces the training split's."""
    o = dict(DEFAULTS, **(task_section or {}))
    kind, clean = o["tokenizer"], o["clean"]
    if kind not in ("char", "byte") or clean not in ("auto", "on", "off"):
        raise CorpusError(f"task.tokenizer '{kind}' / task.clean '{clean}': expected char or byte / auto, on or off")
    files, parts = [], []
    for path, data in text_files(o["path"]):
        if kind == "char":
            try:
                data.decode("utf-8")  # Python's decoder is strict RFC 3629, as qkv's
            except UnicodeDecodeError as e:
                raise CorpusError(f"{path}: not valid UTF-8 at byte {e.start}: {e.reason}; use task.tokenizer: byte")
        if clean == "on" or (clean == "auto" and needs_cleaning(data)):
            data = clean_text(data)
        if data:
            files.append(path)
            parts.append(data if data.endswith(b"\n") else data + b"\n")
    text = b"".join(parts)
    if not text:
        raise CorpusError(f"task.path: corpus {o['path']} has no text")
    if kind == "char":
        tokens = np.frombuffer(text.decode("utf-8").encode("utf-32-le"), dtype="<u4").astype(np.int64)
    else:
        tokens = np.frombuffer(text, dtype=np.uint8).astype(np.int64)
    n_train, n_val, n_test = split_sizes(len(tokens), float(o["val_fraction"]), float(o["test_fraction"]))
    pieces = tokens[:n_train], tokens[n_train:n_train + n_val], tokens[n_train + n_val:]
    if kind == "byte":
        return TextData(files, text, None, pieces)
    cps = np.unique(pieces[0]) if vocab is None else np.asarray(vocab, dtype=np.int64)
    unk = len(cps)

    def encode(x):
        i = np.searchsorted(cps, x)
        i_clipped = np.minimum(i, len(cps) - 1)
        return np.where(cps[i_clipped] == x, i_clipped, unk).astype(np.int64)
    return TextData(files, text, [int(c) for c in cps], tuple(encode(p) for p in pieces))


class TextTask:
    """qkv's data::Text: windows of `length` tokens (inputs) and the next tokens (targets)."""
    name, seq2seq = "text", False

    def __init__(self, task_section, vocab=None, data=None):
        o = dict(DEFAULTS, **(task_section or {}))
        self.length = int(o["length"])
        self.data = data or load(o, vocab)
        self.input_vocab = self.num_classes = self.data.vocab_size
        self.input_length = self.target_length = self.length
        T = self.length
        for what, ids in (("training", self.data.train), ("validation", self.data.val)):
            if len(ids) < T + 1:
                raise CorpusError(f"task: the {what} split has {len(ids)} tokens, fewer than one window of "
                                  f"task.length + 1 = {T + 1}")

    def split_size(self, ids):
        return 0 if len(ids) <= self.length else (len(ids) - 1) // self.length

    def windows(self, ids, starts):
        idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(self.length + 1)
        w = ids[idx]
        return {"inputs": np.ascontiguousarray(w[:, :-1]), "targets": np.ascontiguousarray(w[:, 1:])}

    def held_out(self, seed, eval_size, split="val"):
        """The first min(eval_size, windows in the split) windows of the validation (or test) split
        (`seed` is not used: the windows tile the split; the argument keeps qkv_tasks' interface)."""
        ids = self.data.val if split == "val" else self.data.test
        n = min(int(eval_size), self.split_size(ids))
        return self.windows(ids, [k * self.length for k in range(n)])

    def train_examples(self, seed, first, count):
        """Training examples first .. first+count-1 (qkv draws example k from its own generator)."""
        stream = qkv_tasks.train_stream(seed)
        n = len(self.data.train) - self.length
        starts = [qkv_tasks.Generator(qkv_tasks.hash64(stream, first + r)).randint(n) for r in range(count)]
        return self.windows(self.data.train, starts)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Read a corpus as qkv's text task does and print its sizes.")
    ap.add_argument("path")
    ap.add_argument("--tokenizer", default="char", choices=["char", "byte"])
    ap.add_argument("--clean", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--test-fraction", type=float, default=0.05)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--eval-size", type=int, default=512)
    a = ap.parse_args(argv)
    section = {"path": a.path, "tokenizer": a.tokenizer, "clean": a.clean, "val_fraction": a.val_fraction,
               "test_fraction": a.test_fraction, "length": a.length}
    try:
        task = TextTask(section)
    except (CorpusError, OSError) as e:
        print(f"text_corpus: {e}", file=sys.stderr)
        return 2
    d = task.data
    print(f"{len(d.files)} files, {len(d.text)} bytes after cleaning, {len(d.train) + len(d.val) + len(d.test)} tokens, "
          f"V {d.vocab_size}; train / val / test {len(d.train)} / {len(d.val)} / {len(d.test)}; "
          f"{len(task.held_out(1, a.eval_size)['inputs'])} validation windows of {a.length}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
