"""examples/walkthrough.ipynb runs top to bottom (on the CPU) and shows what it promises."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "walkthrough.ipynb"


def _outputs(cell) -> tuple[str, str]:
    text, html = "", ""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text += out.get("text", "")
        data = out.get("data", {})
        text += data.get("text/plain", "")
        html += data.get("text/html", "")
    return text, html


def test_walkthrough_runs_on_the_cpu(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("scipy")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU, even where a GPU is
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any error
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.get("output_type") != "error" for c in code for o in c.get("outputs", []))
    text = [_outputs(c)[0] for c in code]
    html = [_outputs(c)[1] for c in code]
    assert "wrote" in text[0]
    # the image, viewed: its level table and a thumbnail
    assert "reads land on cpu" in text[1]
    assert 'class="lgpu-levels"' in html[1] and "(96, 256, 256)" in html[1]
    assert "data:image/png;base64," in html[1]
    # a region read, smoothed and written as a new 3-level pyramid
    assert "numpy (64, 128, 128) uint16" in text[2]
    assert "numpy (64, 128, 128)" in text[3]
    assert "largest difference after the round trip: 0.0" in text[4]
    assert "(64, 128, 128)" in html[4] and "(16, 32, 32)" in html[4]
    assert "OK: " in text[5] and "exit code 0" in text[5]
