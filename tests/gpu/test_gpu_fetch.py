"""kvikio's thread pool reads the same bytes as the engine's pread threads (GPU host only:
kvikio needs the CUDA driver even for host reads)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from linumpy_gpu.io.sources import ByteRequest, LocalFileSource
from tests.helpers.fetch_cases import mixed_requests, recording_allocator, write_chunk_files
from tests.helpers.writers import volume, write_zarr_variant

pytestmark = pytest.mark.gpu


@pytest.fixture
def files(tmp_path):
    return tmp_path, write_chunk_files(
        tmp_path, 300, 400_000, seed=4
    )  # more than kvikio_fetch.OPEN_FILES at once


@pytest.mark.parametrize("slow_storage", [False, True])
@pytest.mark.parametrize("staged", [False, True])
def test_kvikio_source_equals_pread_source(files, staged, slow_storage):
    """Page cache (few reads in flight) and slow storage (many) alike."""
    from linumpy_gpu.gpu.kvikio_source import KvikioFileSource

    root, blobs = files
    requests = mixed_requests(blobs)
    allocate, handed_out = recording_allocator()

    source = KvikioFileSource(root)
    source.slow_storage = slow_storage
    got = source.fetch(requests, allocate if staged else None)
    expected = LocalFileSource(root).fetch(requests)
    assert len(got) == len(expected)
    for r, a, b in zip(requests, got, expected, strict=True):
        assert (a is None) == (b is None), r
        if a is not None:
            assert bytes(a) == bytes(b), r
    if staged:
        assert len(handed_out) >= len(blobs) - 1  # every non-empty read went to the allocator


def test_unreadable_file_names_the_file(files):
    from linumpy_gpu.gpu.kvikio_source import KvikioFileSource

    root, _ = files
    (root / "c" / "dir").mkdir()
    with pytest.raises(OSError, match="c/dir"):
        KvikioFileSource(root).fetch([ByteRequest("c/dir")])


def test_images_read_through_kvikio_and_the_engine_reader_reads_the_same(tmp_path):
    from linumpy_gpu.gpu.kvikio_source import KvikioFileSource

    data = volume(shape=(40, 64, 64))
    write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data, missing_fraction=0.2)
    arr = zarr.open_array(str(tmp_path / "a.zarr"))
    from linumpy_gpu.engine import ChunkedArrayReader
    from linumpy_gpu.gpu.backend import GpuBackend

    # no host threads: the device path reads this small image too, not the CPU backend
    reader = ChunkedArrayReader(arr, GpuBackend(host_threads=0))
    assert type(reader.source) is KvikioFileSource
    np.testing.assert_array_equal(reader.read(()).get(), arr[...])
    pread = ChunkedArrayReader(
        arr, GpuBackend(host_threads=0), source=LocalFileSource(tmp_path / "a.zarr")
    )
    np.testing.assert_array_equal(pread.read(()).get(), arr[...])
