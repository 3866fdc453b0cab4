"""Jupyter summaries (``_repr_html_``): content, escaping, the thumbnail and what it reads."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
import zarr

import linumpy_gpu as lg
from linumpy_gpu.image import repr as html_repr


def _volume(shape, seed=0, dtype="u2"):
    return np.random.default_rng(seed).integers(0, 4000, size=shape).astype(dtype)


@pytest.fixture
def image(tmp_path):
    data = _volume((2, 12, 40, 48))
    data[0, :, :20, :] = 0  # channel 0 (blue) dark in the top half
    data[1] = 0  # channel 1 (green) dark everywhere
    img = lg.write_ome_zarr(
        tmp_path / "img.zarr",
        data,
        axes="czyx",
        units=[None, "micrometer", "micrometer", "micrometer"],
        scale=(1.0, 2.0, 0.5, 0.5),
        translation=(0.0, 1.0, 2.0, 3.0),
        channels=[
            {
                "label": "dapi",
                "color": "0000FF",
                "window": {"start": 0, "end": 100, "min": 0, "max": 65535},
            },
            {
                "label": "gfp",
                "color": "00FF00",
                "window": {"start": 0, "end": 4000, "min": 0, "max": 65535},
            },
        ],
        levels=2,
        name="cells",
    )
    lg.write_labels(img, "nuclei", (data % 3).astype("u2"), colors={1: (255, 0, 0, 255)})
    return lg.open_ome_zarr(tmp_path / "img.zarr")


def _png_of(html: str) -> np.ndarray:
    from PIL import Image

    (uri,) = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri))))


def test_image_summary_lists_levels_axes_channels_labels(image):
    html = image._repr_html_()
    assert "cells" in html and "NGFF 0.5" in html
    assert 'class="lgpu-levels"' in html
    for lv in image.levels:
        assert f"({', '.join(map(str, lv.shape))})" in html
        assert f"({', '.join(map(str, lv.chunks))})" in html
    assert "uint16" in html and "zstd(level=3, checksum=True)" in html
    assert "(1, 2, 0.5, 0.5)" in html and "(0, 1, 2, 3)" in html  # scale, translation
    assert "<th>unit</th>" in html and "micrometer" in html
    assert "background:#0000FF" in html and "background:#00FF00" in html  # swatches
    assert "dapi" in html and "gfp" in html and "start 0, end 100" in html
    assert 'class="lgpu-labels"' in html and "nuclei" in html and "background:#FF0000" in html


def test_units_only_when_the_store_gives_them(tmp_path):
    from tests.helpers.writers import volume, write_ome_zarr_py

    path = write_ome_zarr_py(tmp_path / "o.zarr", np.stack([volume(), volume(seed=1)]), "0.4")
    html = lg.open_ome_zarr(path)._repr_html_()
    assert "<th>unit</th>" not in html and "micrometer" not in html


def test_thumbnail_is_a_coloured_maximum_projection(image):
    pytest.importorskip("PIL")
    html = image._repr_html_()
    rgb = _png_of(html)
    assert rgb.shape == (40, 48, 3)  # level 0: 40 x 48 is below the minimum size
    top, bottom = rgb[:20], rgb[20:]
    assert top.max() == 0  # both channels dark there
    assert (bottom[..., 2] > 0).any() and bottom[..., :2].max() == 0  # blue only
    assert "maximum projection of level 0" in html


def test_thumbnail_comes_from_a_small_level_never_level_0(tmp_path, monkeypatch):
    img = lg.write_ome_zarr(
        tmp_path / "big.zarr", _volume((4, 1100, 1000), dtype="u1"), axes="zyx", levels=4
    )
    img = lg.open_ome_zarr(tmp_path / "big.zarr")
    read = []
    original = lg.Level.read

    def spy(self, *args, **kwargs):
        read.append(self.index)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lg.Level, "read", spy)
    # levels: 1100x1000, 550x500, 275x250, 138x125: the coarsest of at least 128 px
    assert html_repr.thumbnail_level(img) == (3, "maximum projection of level 3")
    html = img._repr_html_()
    assert read == [3]
    assert "maximum projection of level 3" in html


def test_no_thumbnail_when_no_level_is_small(tmp_path, monkeypatch):
    img = lg.write_ome_zarr(
        tmp_path / "one.zarr", np.zeros((2, 600, 700), "u1"), axes="zyx", levels=1
    )
    monkeypatch.setattr(lg.Level, "read", lambda *a, **k: pytest.fail("read a level"))
    html = img._repr_html_()
    assert "<img" not in html
    assert "no thumbnail: the coarsest level (0, y/x 600x700" in html


def test_no_thumbnail_from_a_small_level_in_huge_chunks(tmp_path, monkeypatch):
    """A small level whose chunks are far larger (a writer keeping one chunk shape on every
    level) would decode them whole: what a thumbnail may read counts the chunks."""
    path = tmp_path / "big-chunks.zarr"
    lg.write_ome_zarr(path, np.ones((8, 128, 128), "u2"), levels=1)
    root = zarr.open_group(str(path), mode="r+")
    root.create_array(
        "0",
        shape=(8, 128, 128),
        dtype="u2",
        chunks=(256, 1024, 1024),
        overwrite=True,
        dimension_names=["z", "y", "x"],
        fill_value=1,
    )  # 512 MiB to decode for a 256 KiB level
    img = lg.open_ome_zarr(path)
    monkeypatch.setattr(lg.Level, "read", lambda *a, **k: pytest.fail("read a level"))
    assert "<img" not in img._repr_html_()


@pytest.mark.parametrize("scale", [1e307, 1e-310])
def test_scales_a_display_cannot_follow_still_show(tmp_path, scale):
    img = lg.write_ome_zarr(
        tmp_path / "s.zarr", np.ones((4, 32, 32), "u1"), scale=(1.0, scale, 1.0), levels=1
    )
    html = img._repr_html_()
    assert "<img" in html


def test_a_thumbnail_that_fails_does_not_break_the_summary(image, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(lg.Level, "read", broken)
    html = image._repr_html_()
    assert "no thumbnail: reading level 0 failed (OSError: disk gone)" in html
    assert 'class="lgpu-levels"' in html


def test_metadata_text_is_escaped(tmp_path):
    evil = '"><script>alert(1)</script>'
    img = lg.write_ome_zarr(
        tmp_path / "e.zarr",
        _volume((2, 8, 16, 16)),
        axes="czyx",
        channels=[{"label": evil, "color": "FF0000"}, {"label": "<b>x</b>", "color": "00FF00"}],
        name=evil,
    )
    html = img._repr_html_()
    assert "<script>" not in html and "<b>x</b>" not in html
    assert "&lt;script&gt;" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    # colours go into style attributes only when they are 6 hex digits
    assert html_repr._swatch("red;background:url(x)") == ""
    assert "background:#00ff00" in html_repr._swatch("00ff00")


def test_level_labels_plate_well_summaries(image, tmp_path):
    level_html = image[1]._repr_html_()
    assert "Level" in level_html and "(2, 6, 20, 24)" in level_html
    assert "(2, 12, 40, 48)" not in level_html
    labels_html = image.labels._repr_html_()
    assert "nuclei" in labels_html and "background:#FF0000" in labels_html
    label_html = image.labels["nuclei"]._repr_html_()
    assert "label image" in label_html and "<img" in label_html

    root = zarr.open_group(str(tmp_path / "plate.zarr"), mode="w", zarr_format=3)
    root.attrs.put(
        {
            "ome": {
                "version": "0.5",
                "plate": {
                    "name": "<screen>",
                    "rows": [{"name": "A"}, {"name": "B"}],
                    "columns": [{"name": "1"}, {"name": "2"}, {"name": "3"}],
                    "wells": [{"path": "B/3", "rowIndex": 1, "columnIndex": 2}],
                },
            }
        }
    )
    well = root.create_group("B/3")
    well.attrs.put({"ome": {"version": "0.5", "well": {"images": [{"path": "0"}]}}})
    plate = lg.open_ome_zarr(tmp_path / "plate.zarr")
    html = plate._repr_html_()
    assert "Plate" in html and "&lt;screen&gt;" in html and "2 rows x 3 columns" in html
    assert html.count("&#9679;") == 1 and "<img" not in html
    well_html = plate["B/3"]._repr_html_()
    assert "Well" in well_html and "1 field(s)" in well_html


def test_png_encoder():
    PIL = pytest.importorskip("PIL.Image")
    rgb = np.random.default_rng(0).integers(0, 256, (17, 23, 3)).astype("u1")
    for pixels in (rgb, rgb[..., 0]):
        data = html_repr.encode_png(pixels)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        np.testing.assert_array_equal(np.asarray(PIL.open(io.BytesIO(data))), pixels)
    with pytest.raises(ValueError):
        html_repr.encode_png(np.zeros((4, 4, 2), "u1"))


def test_composite_windows_colours_and_inactive_channels():
    from linumpy_gpu.ngff import Channel

    proj = np.zeros((2, 2, 2), "u2")
    proj[0, 0, 0] = 50
    proj[1, 1, 1] = 200
    channels = [
        Channel("a", "FF0000", {"start": 0, "end": 100}, True),
        Channel("b", "00FF00", {"start": 0, "end": 100}, False),
    ]
    rgb = html_repr.composite(proj, channels)
    assert tuple(rgb[0, 0]) == (128, 0, 0)  # half the window, red
    assert tuple(rgb[1, 1]) == (0, 0, 0)  # inactive channel left out
    grey = html_repr.composite(proj[:1])
    assert grey[0, 0, 0] == grey[0, 0, 1] == grey[0, 0, 2] > 0
