"""The package's layers import downward only, and no modules import one another in a cycle.

API -> image / write (front ends) -> ngff (metadata) -> engine -> backends -> nvCOMP and
kvikio wrappers, all of them on the foundation (errors, config, progress, codecs, core,
io). Imports inside functions count; imports only for type checkers do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "linumpy_gpu"

# (rank, module prefixes): a module may import modules of its own rank or below.
LAYERS = [
    (0, ["errors", "config", "_version", "codecs", "core", "io", "progress"]),
    (1, ["gpu.nvcomp", "gpu.kernels", "gpu.zstd_check", "gpu.deps", "gpu.pinned"]),
    (
        2,
        [
            "backends",
            "gpu.backend",
            "gpu.host_decode",
            "gpu.staging",
            "gpu.copy_jobs",
            "gpu.kvikio_source",
        ],
    ),
    (3, ["engine"]),
    (4, ["ngff"]),
    (5, ["image", "write", "gpu.zarr_codec", "gpu.context", "gpu.gds_store"]),
    (6, ["", "__main__", "cli", "sample", "napari", "gpu", "gpu.report", "gpu.read"]),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def rank(module: str) -> int:
    best, best_len = None, -1
    for r, prefixes in LAYERS:
        for prefix in prefixes:
            matches = module == prefix or (prefix and module.startswith(prefix + "."))
            if matches and len(prefix) > best_len:
                best, best_len = r, len(prefix)
    assert best is not None, f"module '{module}' is in no layer: add it to LAYERS"
    return best


def imports_of(path: Path) -> set[str]:
    """The package's modules ``path`` imports (outside ``if TYPE_CHECKING:`` blocks)."""
    tree = ast.parse(path.read_text())
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            skipped.update(id(n) for n in ast.walk(node))
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(_local(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = _local(node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                # "from pkg import name" imports the module pkg.name where one exists
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules}


def _local(name: str) -> str | None:
    if name == "linumpy_gpu":
        return ""
    if name.startswith("linumpy_gpu."):
        return name[len("linumpy_gpu.") :]
    return None


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def test_no_relative_imports():
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if any(
            isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(ast.parse(p.read_text()))
        )
    ]
    assert offenders == []


def test_layers_import_downward_only():
    upward = [
        f"{a} (layer {rank(a)}) imports {b} (layer {rank(b)})"
        for a, targets in graph().items()
        for b in targets
        if rank(b) > rank(a)
    ]
    assert upward == []


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if nxt == node or nxt == "" or node.startswith(nxt + ".") or nxt.startswith(node + "."):
                continue  # a package and its own modules
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_checker_sees_an_upward_import(tmp_path):
    """The checker itself: an engine module importing the image layer is caught, also from
    inside a function, and a type checker's import is not."""
    fake = tmp_path / "mod.py"
    fake.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from linumpy_gpu.write import write_ome_zarr\n"
        "def f():\n    from linumpy_gpu.image import open_ome_zarr\n"
        "from linumpy_gpu import config\n"
    )
    assert imports_of(fake) == {"image", "config"}
    assert rank("image") > rank("engine.reader")
