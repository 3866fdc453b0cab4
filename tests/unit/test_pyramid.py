"""Downsampling for pyramids: means over partial edge blocks, the mode for labels."""

from __future__ import annotations

import numpy as np

from linumpy_gpu.engine.pyramid import downsample


def test_mean_downsample_handles_partial_edges():
    a = np.arange(5 * 3, dtype="f4").reshape(5, 3)
    got = downsample(a, (2, 2), "mean")
    expected = np.array(
        [
            [np.mean(a[0:2, 0:2]), np.mean(a[0:2, 2:3])],
            [np.mean(a[2:4, 0:2]), np.mean(a[2:4, 2:3])],
            [np.mean(a[4:5, 0:2]), np.mean(a[4:5, 2:3])],
        ],
        dtype="f4",
    )
    np.testing.assert_allclose(got, expected)


def test_mode_downsample_for_labels():
    a = np.array([[1, 1, 2, 3], [1, 2, 3, 3], [5, 5, 0, 0], [5, 4, 0, 7]], dtype="u4")
    np.testing.assert_array_equal(downsample(a, (2, 2), "mode"), [[1, 3], [5, 0]])
    np.testing.assert_array_equal(downsample(a, (2, 2), "nearest"), [[1, 2], [5, 0]])
