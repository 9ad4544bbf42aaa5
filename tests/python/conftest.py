"""The Python module's tests: the build to test, the BLAS kernel both sides run, and the
checkpoints the tests read (trained here by the qkv command on tiny configs, in seconds).

    QKV_BUILD_DIR=build /usr/bin/python3 -m pytest tests/python -q     (or --qkv-build build)

The module is imported from BUILD/python, the command is BUILD/qkv. Without the module the suite
is skipped, except under CI=true, where that fails (CI must run every test); CTest runs it as
`python.pytest` (tests/CMakeLists.txt).

Bit-for-bit comparisons with the qkv command need both sides on one OpenBLAS kernel. OpenBLAS
reads OPENBLAS_CORETYPE once, when the first library loads it: `import numpy` does (Debian's
libblas.so.3 is OpenBLAS), and so `import qkv`. The command chooses its own kernel from the CPU
unless QKV_BLAS_CORETYPE is set. So, before anything imports numpy, this process sets
OPENBLAS_CORETYPE to the kernel the command chooses here (as `qkv info` reports it), and every
command and Python process the tests start gets the kernel this process then runs
(QKV_BLAS_CORETYPE, OPENBLAS_CORETYPE): the same kernel on any CPU.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

SOURCE = pathlib.Path(__file__).resolve().parents[2]


def pytest_addoption(parser):
    parser.addoption("--qkv-build", default=None, help="the build directory (default: $QKV_BUILD_DIR, else build/)")


def _under_ci():
    return os.environ.get("CI") == "true"


def pytest_configure(config):
    build = config.getoption("--qkv-build") or os.environ.get("QKV_BUILD_DIR") or str(SOURCE / "build")
    build = pathlib.Path(build).resolve()
    os.environ["QKV_BUILD_DIR"] = str(build)
    sys.path.insert(0, str(build / "python"))
    # Before numpy is imported: the kernel the command runs on this CPU.
    cli = build / "qkv"
    if cli.exists():
        env = {k: v for k, v in os.environ.items() if k != "QKV_BLAS_CORETYPE"}
        out = subprocess.run([str(cli), "info"], capture_output=True, text=True, env=env).stdout
        m = re.search(r"kernel (\w+)", out)
        if m:
            os.environ["OPENBLAS_CORETYPE"] = m.group(1)
    try:
        import qkv  # noqa: F401
    except ImportError as e:
        why = f"the Python module is not built in {build} ({e}); build it with pybind11-dev installed (QKV_PYTHON=ON)"
        if _under_ci():
            pytest.exit(f"required under CI=true, but not available: {why}", returncode=1)
        pytest.exit(f"[qkv] SKIPPED: {why}", returncode=0)


class Cli:
    """The qkv command of the build, run on the kernel this process runs."""

    def __init__(self, build):
        self.path = build / "qkv"
        import qkv
        self.kernel = qkv.info()["blas_kernel"]
        # Commands and Python processes the tests start run this process's kernel.
        self.env = dict(os.environ, QKV_BLAS_CORETYPE=self.kernel, OPENBLAS_CORETYPE=self.kernel,
                        OMP_WAIT_POLICY="passive")

    def run(self, *args, check=True, cwd=None):
        r = subprocess.run([str(self.path), *map(str, args)], capture_output=True, text=True, env=self.env, cwd=cwd)
        if check and r.returncode != 0:
            raise AssertionError(f"qkv {' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r


@pytest.fixture(scope="session")
def cli():
    build = pathlib.Path(os.environ["QKV_BUILD_DIR"])
    if not (build / "qkv").exists():
        pytest.fail(f"no qkv command in {build}: build the qkv_cli target")
    return Cli(build)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("qkv")


# Tiny versions of the configs: a masked encoder on the Chinese grammar (configs/grammar_zh.yaml)
# and a character decoder on a small corpus.
GRAMMAR = ["--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.layers=2",
           "--set", "train.steps=60", "--set", "schedule.warmup_steps=5", "--set", "train.eval_every=30",
           "--set", "task.eval_size=96"]
CORPUS = "我爱吃苹果。猫喜欢追逐老鼠。他打碎了花瓶。我们在公园里散步。今天天气很好。\n" * 40


@pytest.fixture(scope="session")
def grammar_ckpt(cli, workdir):
    """A masked encoder (grammar, zh) trained for 60 steps: best.h5."""
    cli.run("train", SOURCE / "configs/grammar_zh.yaml", *GRAMMAR, "--out", workdir / "grammar", "--quiet")
    return workdir / "grammar" / "best.h5"


@pytest.fixture(scope="session")
def text_ckpt(cli, workdir):
    """A character decoder on a small Chinese corpus (rotary positions), 40 steps: last.h5."""
    corpus = workdir / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    cli.run("train", SOURCE / "configs/zh.yaml", "--set", f"task.path={corpus}", "--set", "task.length=32",
            "--set", "model.d_model=32", "--set", "model.d_ff=64", "--set", "model.layers=2",
            "--set", "train.steps=40", "--set", "train.eval_every=20", "--set", "schedule.warmup_steps=5",
            "--set", "task.eval_size=16", "--set", "task.val_fraction=0.2", "--set", "task.test_fraction=0.2",
            "--out", workdir / "text", "--quiet")
    return workdir / "text" / "last.h5"


@pytest.fixture(scope="session")
def grammar(grammar_ckpt):
    import qkv
    return qkv.load(grammar_ckpt)


@pytest.fixture(scope="session")
def text_model(text_ckpt):
    import qkv
    return qkv.load(text_ckpt)
