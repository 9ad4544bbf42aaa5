"""One instrument, one implementation: the same request gives the same numbers through the qkv
command (--json), the studio (`qkv serve`, over HTTP) and Python (import qkv), defaults included,
on every model kind: a masked encoder (grammar), a decoder language model (text), an encoder that
labels positions (sort), an encoder-decoder (seq2seq_reverse) and a recall encoder (swap).

Each front end prints the library's JSON of the same result, so the texts are compared as they
are (bit for bit: every double is written in its shortest exact form); the studio's answers carry
one more member, "ms", which is left out."""
import http.client
import json
import subprocess
import sys
import threading

import pytest

import qkv
from qkv import _qkv

from conftest import SOURCE

sys.path.insert(0, str(SOURCE / "tests" / "studio"))


def train(cli, workdir, name, config, *sets):
    out = workdir / f"fe_{name}"
    if not (out / "best.h5").exists():
        args = ["train", SOURCE / "configs" / config, "--out", out, "--quiet", "--overwrite",
                "--set", "schedule.warmup_steps=5", "--set", "train.threads=1"]
        for s in sets:
            args += ["--set", s]
        cli.run(*args)
    return out / "best.h5"


@pytest.fixture(scope="module")
def kinds(cli, workdir, grammar_ckpt, text_ckpt):
    return {
        "masked": grammar_ckpt,
        "decoder": text_ckpt,
        "labels": train(cli, workdir, "sort", "sort.yaml", "train.steps=30", "train.eval_every=15",
                        "task.eval_size=64", "model.layers=1"),
        "seq2seq": train(cli, workdir, "s2s", "seq2seq_reverse.yaml", "train.steps=20", "train.eval_every=10",
                         "task.eval_size=32"),
        "recall": train(cli, workdir, "recall", "recall.yaml", "train.steps=20", "train.eval_every=10",
                        "task.eval_size=32", "model.d_model=32"),
    }


class Studio:
    """`qkv serve` on the checkpoints, on a free loopback port."""

    def __init__(self, cli, paths):
        self.proc = subprocess.Popen([str(cli.path), "serve", *map(str, paths), "--port", "0"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=cli.env)
        self.host = None
        ready = threading.Event()

        def watch():
            for line in self.proc.stdout:
                if line.startswith("qkv studio: http://"):
                    self.host = line.split()[2].split("//")[1].rstrip("/")
                    ready.set()
            ready.set()

        threading.Thread(target=watch, daemon=True).start()
        threading.Thread(target=lambda: self.proc.stderr.read(), daemon=True).start()
        ready.wait(300)
        assert self.host, "qkv serve did not start"

    def post(self, path, body):
        c = http.client.HTTPConnection(self.host, timeout=300)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", "Host": self.host})
        r = c.getresponse()
        text = r.read().decode()
        assert r.status == 200, f"{path} {body}: {r.status} {text}"
        return text

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def studio(cli, kinds):
    s = Studio(cli, [kinds[k] for k in ("masked", "decoder", "labels", "seq2seq")])
    yield s
    s.stop()


MODEL = {"masked": 0, "decoder": 1, "labels": 2, "seq2seq": 3}


def without_ms(text):
    """The studio's answer without its timing (the last member)."""
    return text[:text.rindex(',"ms":')] + "}"


def member(text, name):
    """The JSON text of one member of an object (the studio's answers nest the library's)."""
    return json.dumps(json.loads(text)[name])


@pytest.fixture(scope="module")
def models(kinds):
    return {k: qkv.load(p) for k, p in kinds.items()}


def command_json(cli, *args):
    return cli.run(*args).stdout.strip()


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels", "seq2seq"])
def test_eval_and_heads_are_one_result(cli, kinds, models, kind):
    assert command_json(cli, "eval", kinds[kind], "--json") == _qkv.evaluate(models[kind]._m, False)
    assert command_json(cli, "heads", kinds[kind], "--json", "--examples", 16) == _qkv.heads(models[kind]._m, 16, False)


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels", "seq2seq"])
def test_ablate_is_one_result_in_the_command_the_studio_and_python(cli, kinds, models, studio, kind):
    m = models[kind]._m
    # Each head alone (the default), one set of heads, mean ablation and the pruning curve.
    assert command_json(cli, "ablate", kinds[kind], "--json", "--examples", 16) == \
        _qkv.ablate(m, None, "zero", 16, False, 1, "")
    assert command_json(cli, "ablate", kinds[kind], "--json", "--heads", "0.1", "--mode", "mean", "--examples", 16) == \
        _qkv.ablate(m, "0.1", "mean", 16, False, 1, "")
    assert command_json(cli, "ablate", kinds[kind], "--json", "--prune", "--step", 2, "--examples", 8) == \
        _qkv.ablate(m, None, "zero", 8, True, 2, "")
    studio_text = without_ms(studio.post("/api/heldout", {"model": MODEL[kind], "examples": 16,
                                                          "ablate": {"heads": [[0, 1]], "mode": "mean"}}))
    assert studio_text == _qkv.ablate(m, "0.1", "mean", 16, False, 1, "")


def test_swap_is_one_result(cli, kinds, models):
    assert command_json(cli, "swap", kinds["recall"], "--json", "--examples", 16) == _qkv.swap(models["recall"]._m, 16, 0)
    assert qkv.swap(models["recall"], examples=16)["examples"] == 16


INPUTS = {"masked": {"text": "我爱吃苹果"}, "decoder": {"text": "我爱吃苹果"}, "labels": {"ids": [3, 1, 2, 0]},
          "seq2seq": {"example": 1}}


def cli_input(kind):
    i = INPUTS[kind]
    if "text" in i:
        return ["--text", i["text"]]
    if "ids" in i:
        return ["--text", " ".join(map(str, i["ids"])), "--ids"]
    return ["--example", str(i["example"])]


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels", "seq2seq"])
def test_explain_is_one_result(cli, kinds, models, studio, kind):
    m = models[kind]._m
    py_in = dict(INPUTS[kind], **({"split": "validation"} if "example" in INPUTS[kind] else {}))
    one = command_json(cli, "explain", kinds[kind], *cli_input(kind), "--layer", 0, "--head", 1, "--query", 1, "--json")
    assert one == _qkv.explain(m, py_in, 0, 1, 1).strip()
    answer = studio.post("/api/explain", {"model": MODEL[kind], "input": INPUTS[kind],
                                          "query": {"layer": 0, "head": 1, "position": 1}})
    assert member(answer, "explain") == json.dumps(json.loads(one))
    # Without --layer and --head: every head (the survey).
    assert command_json(cli, "explain", kinds[kind], *cli_input(kind), "--query", 1, "--json") == \
        _qkv.explain(m, py_in, None, None, 1).strip()


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels", "seq2seq"])
def test_the_studio_analysis_is_pythons(models, studio, kind):
    py_in = dict(INPUTS[kind], **({"split": "validation"} if "example" in INPUTS[kind] else {}))
    for ablate, mode in [([], "zero"), ([(0, 0)], "zero"), ([(0, 1)], "mean")]:
        answer = without_ms(studio.post("/api/analyze", {"model": MODEL[kind], "input": INPUTS[kind], "top_k": 3,
                                                         "ablate": {"heads": [list(h) for h in ablate], "mode": mode}}))
        mine = _qkv.analyze(models[kind]._m, py_in, ablate, mode, 3)
        # The studio's answer is the analysis plus "explain" (null here).
        assert answer == mine[:-1] + ',"explain":null}'


def test_fill_is_one_result(cli, kinds, models, studio):
    text = "我爱[MASK]苹[MASK]"
    assert command_json(cli, "fill", kinds["masked"], "--text", text, "--json") == \
        _qkv.fill(models["masked"]._m, {"text": text, "mask_text": "[MASK]"}, 5)
    # The studio's answer to the same text: the same top five at each mask.
    fills = json.loads(command_json(cli, "fill", kinds["masked"], "--text", text, "--json"))["fills"]
    answer = json.loads(studio.post("/api/analyze", {"input": {"text": text}, "top_k": 5}))
    assert answer["answer"]["fills"] == fills


def test_generate_is_one_result(cli, kinds, models):
    out = command_json(cli, "generate", kinds["decoder"], "--prompt", "我爱", "--max-tokens", 12, "--seed", 4, "--json")
    assert out == _qkv.generate(models["decoder"]._m, {"text": "我爱"}, 12, 1.0, 0, 1.0, 4, True, None)


PAIRS = {"masked": ("我爱[MASK]苹果", "我爱[MASK]牛奶", "吃", "喝"), "decoder": ("我爱吃苹", "我们在公", "果", "园"),
         "labels": ("3 1 2 0", "3 1 2 1", "0", "1")}


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels"])
def test_patch_is_one_result_with_its_defaults(cli, kinds, models, studio, kind):
    clean, corrupt, answer, wrong = PAIRS[kind]
    ids = kind == "labels"
    args = ["--ids"] if ids else []
    as_input = (lambda t: {"ids": [int(x) for x in t.split()]}) if ids else (lambda t: {"text": t})
    m = models[kind]._m
    # No --position: the one rule picks it in every front end.
    text = command_json(cli, "patch", kinds[kind], "--clean", clean, "--corrupt", corrupt, *args, "--answer", answer,
                        "--wrong", wrong, "--json")
    py = _qkv.patch(m, as_input(clean), as_input(corrupt), None, answer, wrong, ids, "hook_z", None)
    assert text == py.strip()
    body = {"model": MODEL[kind], "clean": as_input(clean), "corrupt": as_input(corrupt),
            "answer": int(answer) if ids else answer, "wrong": int(wrong) if ids else wrong}
    assert member(studio.post("/api/patch", body), "patching") == json.dumps(json.loads(text))
    # The position rule: the clean row's first mask, else the corrupted row's, else the last.
    r = json.loads(text)
    row = clean.replace("[MASK]", "#")
    assert r["position"] == (row.index("#") if "#" in row else len(r["clean_tokens"]) - 1)
    # Without --answer and --wrong: each run's most likely token, in every front end; when the two
    # are the same token, every front end refuses with the same words.
    cmd = cli.run("patch", kinds[kind], "--clean", clean, "--corrupt", corrupt, *args, "--json", check=False)
    try:
        py, py_error = _qkv.patch(m, as_input(clean), as_input(corrupt), None, None, None, False, "hook_z", None), None
    except ValueError as e:
        py, py_error = None, str(e)
    del body["answer"], body["wrong"]
    c = http.client.HTTPConnection(studio.host, timeout=300)
    c.request("POST", "/api/patch", json.dumps(body), {"Content-Type": "application/json", "Host": studio.host})
    reply = c.getresponse()
    answer_text = reply.read().decode()
    if cmd.returncode == 0:
        assert reply.status == 200 and py is not None
        assert cmd.stdout.strip() == py.strip()
        assert member(answer_text, "patching") == json.dumps(json.loads(cmd.stdout))
    else:
        same = "most likely tokens are the same"
        assert cmd.returncode == 2 and same in cmd.stderr
        assert py_error is not None and same in py_error
        assert reply.status == 400 and same in json.loads(answer_text)["error"]


@pytest.mark.parametrize("kind", ["masked", "decoder", "labels"])
def test_attribute_path_and_lens_are_one_result(cli, kinds, models, studio, kind):
    clean, corrupt, answer, wrong = PAIRS[kind]
    ids = kind == "labels"
    args = ["--ids"] if ids else []
    as_input = (lambda t: {"ids": [int(x) for x in t.split()]}) if ids else (lambda t: {"text": t})
    m = models[kind]._m
    two = {"model": MODEL[kind], "clean": as_input(clean), "corrupt": as_input(corrupt),
           "answer": int(answer) if ids else answer, "wrong": int(wrong) if ids else wrong}
    for method, steps in (("eap-ig", 5), ("eap", 3), ("attribution", 2)):
        text = command_json(cli, "attribute", kinds[kind], "--clean", clean, "--corrupt", corrupt, *args, "--answer",
                            answer, "--wrong", wrong, "--method", method, "--steps", steps, "--json")
        py = _qkv.attribute(m, as_input(clean), as_input(corrupt), None, answer, wrong, ids, method, steps, False,
                            None, None)
        assert text == py.strip()
        body = dict(two, method=method, steps=steps)
        assert member(studio.post("/api/attribute", body), "attribution") == json.dumps(json.loads(text))
        r = json.loads(text)
        assert r["method"] == method and len(r["heads"]) == len(models[kind].attention_layers)
        assert (len(r["edges"]) > 0) == (method != "attribution")
    text = command_json(cli, "path", kinds[kind], "--clean", clean, "--corrupt", corrupt, *args, "--answer", answer,
                        "--wrong", wrong, "--sender", "0.1", "--json")
    py = _qkv.path_patch(m, as_input(clean), as_input(corrupt), None, answer, wrong, ids, (0, 1), [])
    assert text == py.strip()
    assert member(studio.post("/api/path", dict(two, sender=[0, 1])), "path") == json.dumps(json.loads(text))
    receivers = json.loads(text)["receivers"]
    assert receivers[-1]["name"] == "logits" and len(receivers) == 1 + 3 * sum(
        layer["heads"] for layer in models[kind].attention_layers[1:])
    x = clean if not ids else clean
    text = command_json(cli, "lens", kinds[kind], "--text", x, *args, "--top-k", 2, "--json")
    py = _qkv.logit_lens(m, as_input(x), None, None, None, False, 2)
    assert text == py.strip()
    assert member(studio.post("/api/lens", {"model": MODEL[kind], "input": as_input(x), "top_k": 2}), "lens") == \
        json.dumps(json.loads(text))


def test_the_causal_instruments_refuse_an_encoder_decoder_in_every_front_end(cli, kinds, models, studio):
    cmd = cli.run("attribute", kinds["seq2seq"], "--ids", "--clean", "1 2 3", "--corrupt", "1 2 4", "--json", check=False)
    assert cmd.returncode == 2 and "encoder-decoder" in cmd.stderr
    with pytest.raises(ValueError, match="encoder-decoder"):
        _qkv.attribute(models["seq2seq"]._m, {"ids": [1, 2, 3]}, {"ids": [1, 2, 4]}, None, None, None, False, "eap-ig",
                       5, False, None, None)
    c = http.client.HTTPConnection(studio.host, timeout=300)
    body = {"model": MODEL["seq2seq"], "clean": {"ids": [1, 2, 3]}, "corrupt": {"ids": [1, 2, 4]}}
    c.request("POST", "/api/attribute", json.dumps(body), {"Content-Type": "application/json", "Host": studio.host})
    reply = c.getresponse()
    assert reply.status == 400 and "encoder-decoder" in json.loads(reply.read().decode())["error"]
