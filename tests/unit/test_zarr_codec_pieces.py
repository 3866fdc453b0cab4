"""The runs of frames the zarr codecs stage from host memory in one transfer each."""

from __future__ import annotations

import pytest

from linumpy_gpu.gpu.zarr_codec import HOST_PIECE_BYTES, _host_pieces

H = HOST_PIECE_BYTES


@pytest.mark.parametrize(
    ("sizes", "pieces"),
    [
        ([], []),
        ([10], [(0, 1)]),
        ([10, 20, 30], [(0, 3)]),
        ([H, 1], [(0, 1), (1, 2)]),
        ([H // 2, H // 2, 1], [(0, 2), (2, 3)]),
        ([H + 5, 3, H + 1], [(0, 1), (1, 2), (2, 3)]),  # a frame larger than a piece alone
    ],
)
def test_pieces_cover_every_frame_in_order_within_the_bound(sizes, pieces):
    got = _host_pieces(sizes)
    assert got == pieces
    assert [i for a, b in got for i in range(a, b)] == list(range(len(sizes)))
    for a, b in got:
        assert b - a == 1 or sum(sizes[a:b]) <= H
