"""How batches are planned for nvCOMP's zstd workspace (no GPU needed): with the share of
the size-based estimate that sized frames needed, only while decodes size frames."""

from __future__ import annotations

import pytest

from linumpy_gpu.gpu import zstd_batch


def test_planned_share_follows_the_sized_frames_only_while_sizing_is_on(monkeypatch):
    monkeypatch.setattr(zstd_batch, "_temp_share", {})
    nbytes = 3 * 1024 * 1024 + 7  # a size no other test sizes
    monkeypatch.setenv("LINUMPY_GPU_EXACT_WORKSPACE", "1")
    assert zstd_batch.planned_temp_share(nbytes) == 1.0  # nothing sized yet
    zstd_batch._learn_temp_share(nbytes, 0.5)
    zstd_batch._learn_temp_share(nbytes, 0.4)  # the largest share seen is kept
    assert zstd_batch.planned_temp_share(nbytes) == 0.5 * zstd_batch.TEMP_MARGIN
    zstd_batch._learn_temp_share(nbytes, 0.95)
    assert zstd_batch.planned_temp_share(nbytes) == 1.0  # never above the estimate
    zstd_batch._learn_temp_share(nbytes + 1, 0.5)
    assert zstd_batch.planned_temp_share(nbytes + 1) == 0.5 * zstd_batch.TEMP_MARGIN
    # switched off (the default): decodes take the whole estimate, so plans count on it,
    # whatever earlier reads in this process learned
    monkeypatch.delenv("LINUMPY_GPU_EXACT_WORKSPACE")
    assert zstd_batch.planned_temp_share(nbytes + 1) == 1.0
    monkeypatch.setenv("LINUMPY_GPU_EXACT_WORKSPACE", "0")
    assert zstd_batch.planned_temp_share(nbytes + 1) == 1.0


@pytest.mark.parametrize("value", ["true", "yes", "2"])
def test_a_switch_value_other_than_0_or_1_is_refused(monkeypatch, value):
    monkeypatch.setenv("LINUMPY_GPU_EXACT_WORKSPACE", value)
    with pytest.raises(ValueError, match="LINUMPY_GPU_EXACT_WORKSPACE must be 0 or 1"):
        zstd_batch.planned_temp_share(1 << 20)
