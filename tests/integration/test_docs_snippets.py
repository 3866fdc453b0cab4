"""The python blocks of README.md and docs/*.md, and the example scripts, run as pasted.

A block's first line may say what it needs: ``# Needs an NVIDIA GPU ...`` runs it as a GPU
test; ``# ... Not run here: <reason>`` marks code that needs what no test machine has
(a SLURM cluster, another package's GPU module, the reader's own image), reported as a
skip with that reason. Every other block must run on a CPU-only machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.S | re.M)
NOT_RUN = re.compile(r"not run here: (.*)", re.I)


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


def _run(args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def test_every_document_has_python_blocks():
    assert len(_blocks()) >= 20  # a changed fence syntax must not silently drop them all


@pytest.mark.parametrize("code", _blocks())
def test_documented_block_runs(code, tmp_path):
    _run(["-c", code], tmp_path)


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
