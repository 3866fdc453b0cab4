"""NvcompZstdCodec, the batched GPU zstd, gpu_zarr_context and GDSStore."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import ZstdCodec

import linumpy_gpu as lg
from tests.helpers.writers import volume, write_zarr_variant

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def _gpu_batch():
    from linumpy_gpu.gpu.nvcomp.zstd import codec_for_current_device

    return codec_for_current_device()


@pytest.mark.parametrize("checksum", [False, True])
def test_cpu_written_frames_decode_on_gpu(cp, checksum):
    data = volume(shape=(16, 32, 64))
    raw = data.tobytes()
    frames = [numcodecs.Zstd(level=level, checksum=checksum).encode(raw) for level in range(-5, 23)]
    batch = _gpu_batch().decode_host(frames, len(raw))
    assert not batch.failures, batch.failures
    for i in range(len(frames)):
        assert batch.slot(i).get().tobytes() == raw


def _frames(n: int, shape=(16, 64, 64)) -> tuple[list[bytes], list[bytes]]:
    raws = [volume(shape=shape, seed=i).tobytes() for i in range(n)]
    return raws, [numcodecs.Zstd(level=3).encode(r) for r in raws]


def _drop_content_size(frame: bytes) -> bytes:
    """Rewrite a single-segment zstd frame as one without a content size (as some writers,
    e.g. streaming compressors, produce): window descriptor instead of the size field."""
    fhd = frame[4]
    assert (fhd >> 5) & 1, "expected a single-segment frame"
    fcs_size = (1, 2, 4, 8)[fhd >> 6]
    size = int.from_bytes(frame[5 : 5 + fcs_size], "little") + (256 if fcs_size == 2 else 0)
    window_log = max(10, (size - 1).bit_length())
    new_fhd = fhd & 0x1F & ~0x20  # no content size, not single segment; keep checksum/dict bits
    return frame[:4] + bytes([new_fhd, (window_log - 10) << 3]) + frame[5 + fcs_size :]


def test_workspace_carves_each_buffer_from_the_smallest_region_that_holds_it(cp):
    """The decoder's side of the batch plan: the same best-fit rule over the output tail
    and the read's own buffer, so a batch planned to fit takes no memory of its own."""
    from linumpy_gpu.gpu.nvcomp.zstd import Workspace

    tail = cp.zeros(4096, dtype=np.uint8)
    spare = cp.zeros(1024, dtype=np.uint8)
    workspace = Workspace(tail.data.ptr, tail.nbytes, tail)
    workspace.add(spare.data.ptr, spare.nbytes, spare)
    assert workspace.room() == 4096

    def region_of(buffer):
        ptr = buffer.data.ptr
        for name, region in (("tail", tail), ("spare", spare)):
            if region.data.ptr <= ptr and ptr + buffer.nbytes <= region.data.ptr + region.nbytes:
                return name
        return "allocated"

    comp = workspace.take(1000)  # fits both: the smaller one
    slots = workspace.take(3000)  # only the tail holds it now
    temp = workspace.take(1100)  # 1024 - 3072 left in the tail: allocated
    assert [region_of(b) for b in (comp, slots, temp)] == ["spare", "tail", "allocated"]
    assert workspace.used == 4000
    assert workspace.room() == 4096 - 3072
    slots[...] = 7  # carved views write where they say
    assert int(tail[:3000].sum()) == 7 * 3000


@pytest.mark.parametrize("concatenated", [False, True])
def test_slots_decoded_in_borrowed_memory_move_out_before_they_are_used(cp, concatenated):
    """Slots may decode into memory they may not stay in (the batch's own output bytes):
    once decoded they move into the workspace, so that memory can be overwritten at once;
    a frame nvCOMP rejects is decoded on the CPU into its moved slot."""
    from linumpy_gpu.gpu.nvcomp.zstd import SLOT_ALIGN, Workspace, round_up

    raws, frames = _frames(10)
    nbytes = len(raws[0])
    if concatenated:  # valid for the CPU zstd, not for nvCOMP: two frames end to end
        half = nbytes // 2
        frames[3] = numcodecs.Zstd(level=3).encode(raws[3][:half]) + numcodecs.Zstd(level=3).encode(
            raws[3][half:]
        )
    stride = round_up(nbytes, SLOT_ALIGN)
    own = cp.zeros(10 * stride, dtype=np.uint8)
    tail = cp.zeros(1 << 28, dtype=np.uint8)
    workspace = Workspace(tail.data.ptr, tail.nbytes, tail)
    batch = _gpu_batch().decode_host(
        frames, nbytes, workspace=workspace, slot_region=(own.data.ptr, own.nbytes, own)
    )
    own[...] = 0xEE  # the output is written over the old slots
    cp.cuda.Stream.null.synchronize()
    assert not batch.failures
    assert batch.cpu_decoded == ([3] if concatenated else [])
    assert [batch.slot(i).get().tobytes() for i in range(10)] == raws
    assert all(tail.data.ptr <= int(p) < tail.data.ptr + tail.nbytes for p in batch.ptrs)
    # too small a region: the slots are carved from the workspace as usual
    small = cp.zeros(stride, dtype=np.uint8)
    batch = _gpu_batch().decode_host(
        frames,
        nbytes,
        workspace=Workspace(tail.data.ptr, tail.nbytes, tail),
        slot_region=(small.data.ptr, small.nbytes, small),
    )
    assert [batch.slot(i).get().tobytes() for i in range(10)] == raws


@pytest.mark.parametrize("checksum", [False, True])
def test_frames_without_content_size_decode_on_gpu(cp, checksum):
    raw = volume(shape=(8, 64, 64)).tobytes()
    frame = _drop_content_size(numcodecs.Zstd(level=3, checksum=checksum).encode(raw))
    assert frame[4] >> 6 == 0 and not (frame[4] >> 5) & 1
    assert numcodecs.Zstd().decode(frame) == raw  # still a valid frame for the CPU zstd
    batch = _gpu_batch().decode_host([frame], len(raw))
    assert not batch.failures, batch.failures
    assert batch.slot(0).get().tobytes() == raw
    assert not batch.cpu_decoded, "decoded by nvCOMP, not by the CPU fallback"


@pytest.mark.parametrize("checksum", [False, True])
def test_gpu_written_frames_decode_with_cpu_zstd(cp, checksum):
    data = cp.asarray(volume(shape=(8, 64, 64))).reshape(-1).view(np.uint8)
    from linumpy_gpu.gpu.zarr_codec import encode_arrays

    chunks = [data, cp.ascontiguousarray(data[::-1]), cp.zeros_like(data)]
    frames = encode_arrays(chunks, checksum)
    for frame, chunk in zip(frames, chunks, strict=True):
        assert bool(frame[4] & 0x04) == checksum
        assert numcodecs.Zstd().decode(frame) == chunk.get().tobytes()
    if checksum:
        broken = bytearray(frames[0])
        broken[-1] ^= 0xFF
        with pytest.raises(RuntimeError):
            numcodecs.Zstd().decode(bytes(broken))
        batch = _gpu_batch().decode_host([bytes(broken)], data.size)
        assert "checksum" in batch.failures[0]


def test_checksum_mismatch_is_detected_on_gpu(cp):
    raw = volume(shape=(8, 32, 32)).tobytes()
    frame = bytearray(numcodecs.Zstd(level=3, checksum=True).encode(raw))
    frame[-2] ^= 0x10
    batch = _gpu_batch().decode_host([bytes(frame)], len(raw))
    assert 0 in batch.failures and "checksum" in batch.failures[0].lower()


def test_codec_validates_like_zarr_and_serialises_as_zstd():
    from linumpy_gpu.gpu.zarr_codec import NvcompZstdCodec

    assert (
        NvcompZstdCodec(level=5, checksum=True).to_dict()
        == ZstdCodec(level=5, checksum=True).to_dict()
    )
    for bad in [dict(level="3"), dict(checksum="yes"), dict(level=1.5)]:
        with pytest.raises(Exception) as ours:
            NvcompZstdCodec(**bad)
        with pytest.raises(Exception) as theirs:
            ZstdCodec(**bad)
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "variant",
    [
        "v3-zstd",
        "v3-zstd-checksum",
        "v3-sharded-zstd",
        "v3-transpose-crc32c",
        "v2-zstd-dot",
        "v2-blosc-lz4-shuffle",
        "v2-gzip-fortran",
        "v2-lz4",
        "v3-blosc-zstd-bitshuffle",
    ],
)
def test_plain_zarr_inside_context_returns_cupy(tmp_path, cp, variant):
    data = volume()
    write_zarr_variant(tmp_path / "a.zarr", variant, data)
    expected = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    with lg.gpu_zarr_context():
        arr = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")
        got = arr[...]
        assert isinstance(got, cp.ndarray)
        np.testing.assert_array_equal(got.get(), expected)
        np.testing.assert_array_equal(arr[3:9, ::2, 5].get(), expected[3:9, ::2, 5])


def test_context_uses_our_codec_and_restores_settings_even_on_error(tmp_path, cp):
    from linumpy_gpu.gpu.zarr_codec import NvcompZstdCodec

    write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", volume())
    before = {
        k: zarr.config.get(k)
        for k in ("buffer", "ndbuffer", "codec_pipeline.batch_size", "async.concurrency")
    }
    before_codec = zarr.config.get("codecs.zstd")
    with pytest.raises(KeyError), lg.gpu_zarr_context():
        arr = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")
        assert isinstance(arr.metadata.codecs[1], NvcompZstdCodec)
        assert zarr.config.get("codec_pipeline.batch_size") >= 1024
        with lg.gpu_zarr_context(batch_size=7):
            assert zarr.config.get("codec_pipeline.batch_size") == 7
        assert zarr.config.get("codec_pipeline.batch_size") >= 1024
        raise KeyError("boom")
    assert {k: zarr.config.get(k) for k in before} == before
    assert zarr.config.get("codecs.zstd") == before_codec
    arr = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")
    assert type(arr.metadata.codecs[1]) is ZstdCodec
    from zarr.codecs._v2 import V2Codec

    assert "decode" not in vars(V2Codec)


def test_writes_inside_context_are_readable_by_cpu_zarr(tmp_path, cp):
    data = volume(shape=(20, 30, 40))
    with lg.gpu_zarr_context():
        arr = zarr.create_array(
            str(tmp_path / "w.zarr"),
            shape=data.shape,
            chunks=(8, 16, 16),
            dtype=data.dtype,
            compressors=[ZstdCodec(level=3, checksum=True)],
        )
        arr[...] = cp.asarray(data)
        v2 = zarr.create_array(
            str(tmp_path / "w2.zarr"),
            shape=data.shape,
            chunks=(8, 16, 16),
            dtype=data.dtype,
            zarr_format=2,
            compressors=numcodecs.Blosc(),
        )
        v2[...] = cp.asarray(data)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "w.zarr"))[...], data)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "w2.zarr"))[...], data)


def test_fused_codec_pipeline_is_supported_on_gpu(tmp_path, cp):
    if "FusedCodecPipeline" not in dir(__import__("zarr.core.codec_pipeline", fromlist=["x"])):
        pytest.skip(f"zarr {zarr.__version__} has no FusedCodecPipeline (3.3+)")
    data = volume()
    write_zarr_variant(tmp_path / "a.zarr", "v3-zstd", data, missing_fraction=0)
    calls = []
    from linumpy_gpu.gpu import zarr_codec as zstd_codec

    original = zstd_codec.decode_frames

    def spy(frames, nbytes, *args):
        calls.append(len(frames))
        return original(frames, nbytes, *args)

    zstd_codec.decode_frames = spy
    try:
        with (
            lg.gpu_zarr_context(),
            zarr.config.set({"codec_pipeline.path": "zarr.core.codec_pipeline.FusedCodecPipeline"}),
        ):
            arr = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")
            got = arr[...]
    finally:
        zstd_codec.decode_frames = original
    np.testing.assert_array_equal(got.get(), data)
    assert calls, "the fused pipeline must decode through nvCOMP, not a silent CPU fallback"


def test_gds_store_reads_ranges_and_writes(tmp_path, cp):
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import cpu, default_buffer_prototype, gpu
    from zarr.core.sync import sync

    from linumpy_gpu.gpu import GDSStore
    from linumpy_gpu.gpu.gds_store import gds_mode

    payload = bytes(range(256)) * 40
    (tmp_path / "obj").write_bytes(payload)
    store = GDSStore(tmp_path)
    assert store.mode == gds_mode() and store.mode in (
        "native GDS",
        "compatibility (POSIX reads, no GDS)",
    )
    host = default_buffer_prototype()
    dev = gpu.buffer_prototype
    for proto in (host, dev):
        assert sync(store.get("obj", proto)).to_bytes() == payload
        assert (
            sync(store.get("obj", proto, RangeByteRequest(10, 300))).to_bytes() == payload[10:300]
        )
        assert sync(store.get("obj", proto, OffsetByteRequest(9000))).to_bytes() == payload[9000:]
        assert sync(store.get("obj", proto, SuffixByteRequest(17))).to_bytes() == payload[-17:]
        assert sync(store.get("missing", proto)) is None
    got = sync(store.get_partial_values(dev, [("obj", RangeByteRequest(0, 5)), ("obj", None)]))
    assert [g.to_bytes() for g in got] == [payload[:5], payload]
    assert isinstance(sync(store.get("obj", dev)).as_array_like(), cp.ndarray)
    sync(store.set("new/obj", gpu.Buffer.from_bytes(b"hello gds")))
    assert (tmp_path / "new" / "obj").read_bytes() == b"hello gds"
    sync(store.set("new/host", cpu.Buffer.from_bytes(b"from host")))
    assert (tmp_path / "new" / "host").read_bytes() == b"from host"
    # a whole zarr array through the store, with GPU buffers
    data = volume()
    write_zarr_variant(tmp_path / "a.zarr", "v3-sharded-zstd", data)
    expected = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    with lg.gpu_zarr_context():
        arr = zarr.open_array(GDSStore(tmp_path / "a.zarr", read_only=True), mode="r")
        np.testing.assert_array_equal(arr[...].get(), expected)


def test_codec_paths_work_from_ordinary_memory_past_the_side_pinned_budget(cp, monkeypatch):
    """Once the side buffers' pinned budget is spent, frames are packed in ordinary memory:
    checked from their device copy instead, decoded and uploaded the same, damage still
    caught. (Encoded frames land in the staging ring instead: see test_gpu_write.)"""
    from linumpy_gpu.gpu.nvcomp.zstd import ZstdBatchCodec

    monkeypatch.setattr("linumpy_gpu.gpu.pinned._budget.budget", 0)
    codec = ZstdBatchCodec()
    raws = [volume(shape=(16, 64, 64), seed=i).tobytes() for i in range(6)]
    frames = [numcodecs.Zstd(level=3, checksum=True).encode(r) for r in raws]
    broken = bytearray(frames[2])
    broken[-1] ^= 0xFF
    frames[2] = bytes(broken)
    batch = codec.decode_host(frames, len(raws[0]))
    assert not codec.packing.is_pinned and codec.packing.capacity == 0
    assert set(batch.failures) == {2} and "checksum" in batch.failures[2]
    assert all(batch.slot(i).get().tobytes() == raws[i] for i in (0, 1, 3, 4, 5))
    raw = codec.upload_raw([r for r in raws[:3]], len(raws[0]))
    assert not raw.failures and raw.slot(1).get().tobytes() == raws[1]


@pytest.mark.parametrize("variant", ["v2-blosc-lz4-shuffle", "v2-lz4", "v3-blosc-zstd-bitshuffle"])
def test_context_decodes_blosc_and_lz4_on_nvcomp(tmp_path, cp, variant, monkeypatch):
    from linumpy_gpu.gpu.nvcomp import streams

    calls, refusals = [], []
    original, refusing = streams.decode_frames, streams._decode_streams

    def counting(codec, frames, nbytes, layout, cpu_decode, *args, **kwargs):
        def no_cpu(chunks):
            raise AssertionError(f"{len(chunks)} chunk(s) sent to the CPU: {refusals}")

        calls.append(len(frames))
        refusals.append(layout.elsewhere)
        return original(codec, frames, nbytes, layout, no_cpu, *args, **kwargs)

    def recording(*args, **kwargs):
        refused = refusing(*args, **kwargs)
        refusals.append(dict(refused))
        return refused

    monkeypatch.setattr(streams, "decode_frames", counting)
    monkeypatch.setattr(streams, "_decode_streams", recording)
    data = volume()
    write_zarr_variant(tmp_path / "a.zarr", variant, data)
    expected = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    with lg.gpu_zarr_context():
        got = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    np.testing.assert_array_equal(got.get(), expected)
    assert sum(calls) > 0


@pytest.mark.parametrize("variant", ["v2-blosc-lz4-shuffle", "v2-lz4", "v3-blosc-zstd-bitshuffle"])
def test_context_decodes_a_batch_in_pieces_and_numbers_damaged_chunks_in_the_batch(
    tmp_path, cp, variant, monkeypatch
):
    from linumpy_gpu.gpu import zarr_codec

    monkeypatch.setattr(zarr_codec, "HOST_PIECE_BYTES", 4096)  # many pieces per zarr batch
    data = volume()
    write_zarr_variant(tmp_path / "a.zarr", variant, data, missing_fraction=0)
    expected = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    with lg.gpu_zarr_context():
        got = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
    np.testing.assert_array_equal(got.get(), expected)

    chunk_files = [
        p for p in (tmp_path / "a.zarr").rglob("*") if p.is_file() and not p.name.startswith(".z")
    ]
    chunk_files = [p for p in chunk_files if p.name != "zarr.json"]
    victim = sorted(chunk_files)[-1]
    victim.write_bytes(b"\x00" * len(victim.read_bytes()))
    with lg.gpu_zarr_context(), pytest.raises(lg.ChunkDecodeError, match="-chunk zarr batch"):
        zarr.open_array(str(tmp_path / "a.zarr"), mode="r")[...]
