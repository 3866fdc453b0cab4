"""The python blocks of README.md and docs/*.md, their ``linumpy-gpu`` commands, and the
example scripts, run as pasted.

A python block's first line may say what it needs: ``# Needs an NVIDIA GPU ...`` runs it
as a GPU test; ``# ... Not run here: <reason>`` marks code that needs what no test machine
has (a SLURM cluster, another package's GPU module, the reader's own image), reported as a
skip with that reason. Every other block must run on a CPU-only machine.

In bash, sh, shell and console blocks (console: the lines after a ``$`` prompt) every
command (``&&`` splits a line into commands) is a test of its own. ``linumpy-gpu``
commands run against a sample store, with the placeholders of the docs' synopses filled
in (see :func:`_variants`); a ``--device gpu`` command runs as a GPU test. Every other
command must match a rule of :data:`NOT_RUN_COMMANDS` and is reported as a skip with
that rule's reason; a command no rule covers fails, so none is dropped unseen.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import linumpy_gpu as lg

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
NOT_RUN = re.compile(r"not run here: (.*)", re.I)
SHELL_BLOCK = re.compile(r"^( *)```(bash|sh|shell|console)\n(.*?)^\1```", re.S | re.M)

# Shell commands the test does not run, by how they start, and why.
NOT_RUN_COMMANDS = [
    (
        re.compile(r"^(python3? -m )?pip |^git clone |^cd( |$)"),
        "installs packages or changes folder: the tests run in an installed checkout",
    ),
    (re.compile(r"^python3? -m pytest"), "runs the test suite this test is part of"),
    (
        re.compile(r"^python3? examples/"),
        "an example script: test_example_script_runs runs each one",
    ),
    (
        re.compile(r"^python3? benchmarks/"),
        "a benchmark: minutes of timed reads and writes, most on a GPU",
    ),
]

# The placeholders of the docs' command synopses and what stands in for them.
STORE_PLACEHOLDERS = ("path/to/image.ome.zarr", "SRC", "STORE")


def _blocks() -> list:
    params = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in BLOCK.finditer(text):
            code = textwrap.dedent(match.group(2))
            line = text[: match.start()].count("\n") + 1
            first = code.splitlines()[0] if code.strip() else ""
            marks = []
            not_run = NOT_RUN.search(first)
            if not_run:
                marks.append(pytest.mark.skip(reason=not_run.group(1)))
            elif first.lower().startswith("# needs an nvidia gpu"):
                marks.append(pytest.mark.gpu)
            name = f"{document.relative_to(ROOT)}:{line}"
            params.append(pytest.param(code, id=name, marks=marks))
    return params


def _shell_commands(text: str) -> list[str]:
    """The commands of one shell block's text: comments and prompts removed, continued
    lines joined, ``&&`` chains split."""
    lines = text.replace("\\\n", " ").splitlines()
    if any(line.startswith("$ ") for line in lines):  # a console block: the rest is output
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    commands = []
    for line in lines:
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        commands += [c.strip() for c in line.split("&&") if c.strip()]
    return commands


def _variants(command: str) -> list[str]:
    """The forms a synopsis is run in. A ``[...]`` group is optional: the command runs
    without any, and once more with every group that offers one choice (no ``|``); a
    group of choices such as ``[--device auto|gpu|cpu]`` is left to its default."""
    groups = re.findall(r"\[([^\]]*)\]", command)
    bare = " ".join(re.sub(r"\[[^\]]*\]", " ", command).split())
    if not groups:
        return [bare]
    full = command
    for group in groups:
        full = full.replace(f"[{group}]", "" if "|" in group else group)
    full = " ".join(full.split())
    return [bare] if full == bare else [bare, full]


def _shell_params() -> list:
    params = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in SHELL_BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 1
            for command in _shell_commands(textwrap.dedent(match.group(3))):
                where = f"{document.relative_to(ROOT)}:{line}"
                reason = next((r for rule, r in NOT_RUN_COMMANDS if rule.search(command)), None)
                words = shlex.split(command)
                while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                    words = words[1:]  # environment assignments before the command
                if reason is not None:
                    marks = [pytest.mark.skip(reason=reason)]
                    params.append(pytest.param(command, id=f"{where} {command}", marks=marks))
                elif words and words[0] == "linumpy-gpu":
                    for form in _variants(command):
                        marks = [pytest.mark.gpu] if "--device gpu" in form else []
                        params.append(pytest.param(form, id=f"{where} {form}", marks=marks))
                else:
                    params.append(pytest.param(command, id=f"{where} {command}"))
    return params


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> Path:
    """The store the commands' placeholders name (read only: commands write elsewhere)."""
    from linumpy_gpu.sample import write_sample

    path = tmp_path_factory.mktemp("docs-sample") / "image.ome.zarr"
    write_sample(path)
    return path


def test_every_document_has_python_blocks():
    assert len(_blocks()) >= 20  # a changed fence syntax must not silently drop them all


def test_documents_have_linumpy_gpu_commands():
    run = [p for p in _shell_params() if not p.marks and p.values[0].startswith("linumpy-gpu")]
    assert len(run) >= 10


def test_synopsis_variants():
    assert _variants("linumpy-gpu demo [--device auto|gpu|cpu] [--out DIR]") == [
        "linumpy-gpu demo",
        "linumpy-gpu demo --out DIR",
    ]
    assert _variants("linumpy-gpu info") == ["linumpy-gpu info"]
    assert _shell_commands("$ pip install -e . && linumpy-gpu info  # check\nok\n") == [
        "pip install -e .",
        "linumpy-gpu info",
    ]


@pytest.mark.parametrize("code", _blocks())
def test_documented_block_runs(code, tmp_path):
    _run(["-c", code], tmp_path)


@pytest.mark.parametrize("command", _shell_params())
def test_documented_command_runs(command, sample_store, tmp_path):
    words = shlex.split(command)
    env = {}
    while re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[0] == "linumpy-gpu", (
        f"no rule says how to run or why not to run {command!r}: run it as a linumpy-gpu "
        "command or add a rule to NOT_RUN_COMMANDS"
    )
    args = []
    for word in words[1:]:
        if word in STORE_PLACEHOLDERS:
            word = str(sample_store)
        elif word == "DST":
            word = str(tmp_path / "converted.ome.zarr")
        elif word == "DIR":
            word = str(tmp_path / "out")
        args.append(word)
    # the command runs as `python -m linumpy_gpu`: the same entry point, whether or not
    # the installed console script is on PATH
    _run(["-m", "linumpy_gpu", *args], tmp_path, env)


@pytest.mark.parametrize("script", ["read_sample.py", "write_pyramid.py", "cluster_pipeline.py"])
def test_example_script_help_writes_nothing(script, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and "usage:" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_example_write_pyramid_replaces_a_store_only_when_asked(tmp_path):
    out = tmp_path / "mine.ome.zarr"
    lg.write_ome_zarr(out, np.ones((4, 16, 16), "u2"), levels=1)
    script = str(ROOT / "examples" / "write_pyramid.py")
    proc = subprocess.run(
        [sys.executable, script, str(out)], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2 and "run again with --overwrite" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert lg.open_ome_zarr(out)[0].shape == (4, 16, 16)
    _run([script, str(out), "--overwrite"], tmp_path)
    assert lg.open_ome_zarr(out)[0].shape != (4, 16, 16)


@pytest.mark.parametrize(
    "script",
    [
        ["read_sample.py", "{tmp}/sample.ome.zarr"],
        ["write_pyramid.py", "{tmp}/out.ome.zarr"],
        ["cluster_pipeline.py", "--cpu", "--workers", "2"],
    ],
    ids=lambda s: s[0],
)
def test_example_script_runs(script, tmp_path):
    if script[0] == "cluster_pipeline.py":
        pytest.importorskip("distributed")
    args = [str(ROOT / "examples" / script[0]), *(a.format(tmp=tmp_path) for a in script[1:])]
    _run(args, tmp_path)
