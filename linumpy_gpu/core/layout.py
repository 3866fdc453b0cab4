"""What the engine needs to know about one zarr array, taken from zarr-python's metadata.

zarr-python parses and validates the metadata (v2 and v3); this module reduces it to the
facts the read engine uses: grid, key encoding, fill value, memory layout of a decoded
chunk, its bytes-to-bytes codecs and, for sharded arrays, the shard index format. An array
whose codec chain the engine does not understand gets ``delegate_reason`` and is read by
zarr-python itself (then moved to the backend), so no array is ever unreadable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from linumpy_gpu.codecs import ByteCodec, from_numcodecs, from_v3_codec
from linumpy_gpu.errors import InvalidMetadataError


@dataclass(frozen=True)
class ChunkFormat:
    """How one stored chunk (or inner chunk of a shard) turns into an array."""

    shape: tuple[int, ...]
    stored_dtype: np.dtype  # with the byte order on disk
    order: str  # 'C' or 'F' (zarr v2)
    transpose: tuple[int, ...] | None  # zarr v3 transpose codec order
    codecs: tuple[ByteCodec, ...]  # bytes-to-bytes, in encode order

    @property
    def nbytes(self) -> int:
        """Bytes of one decoded chunk."""
        return math.prod(self.shape) * self.stored_dtype.itemsize

    @property
    def needs_byteswap(self) -> bool:
        """Whether stored items are in the other byte order than this machine's."""
        return self.stored_dtype.itemsize > 1 and not self.stored_dtype.isnative


@dataclass(frozen=True)
class ShardIndexFormat:
    location: str  # 'start' or 'end'
    little_endian: bool
    crc32c: bool
    inner_per_shard: tuple[int, ...]

    @property
    def n_entries(self) -> int:
        """Inner chunks per shard (entries of its index)."""
        return math.prod(self.inner_per_shard)

    @property
    def nbytes(self) -> int:
        """Bytes of a shard's index, its checksum included."""
        return 16 * self.n_entries + (4 if self.crc32c else 0)


@dataclass(frozen=True)
class ArrayLayout:
    name: str  # for messages: store path of the array
    shape: tuple[int, ...]
    dtype: np.dtype  # native byte order: what reads return
    fill_value: Any
    chunk_shape: tuple[int, ...]  # the decode unit: inner chunk for sharded arrays
    shard_shape: tuple[int, ...] | None
    chunk: ChunkFormat | None
    shard_index: ShardIndexFormat | None
    delegate_reason: str | None
    zarr_format: int
    metadata: Any  # zarr's metadata object, for chunk key encoding

    def storage_key(self, grid_coords: tuple[int, ...]) -> str:
        """Store key (relative to the array) of a chunk, or of a shard for sharded arrays."""
        return self.metadata.encode_chunk_key(grid_coords)

    @property
    def codec_names(self) -> tuple[str, ...]:
        """The codecs of a chunk as short texts (``sharding`` first for sharded arrays)."""
        if self.chunk is None:
            return ()
        names = [c.describe() for c in self.chunk.codecs]
        return (("sharding",) if self.shard_shape else ()) + tuple(names)


def layout_of(array: Any, name: str) -> ArrayLayout:
    """Build the :class:`ArrayLayout` of a zarr-python ``Array``."""
    meta = array.metadata
    shape = tuple(int(s) for s in array.shape)
    dtype = np.dtype(array.dtype)
    native = dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype
    fill = array.fill_value
    if fill is None:
        fill = np.zeros((), dtype=native)[()]
    common = {
        "name": name,
        "shape": shape,
        "dtype": native,
        "fill_value": fill,
        "zarr_format": meta.zarr_format,
        "metadata": meta,
    }
    # The stored grid: for sharded arrays the shard shape (zarr's ``array.chunks`` is inner).
    if meta.zarr_format == 3 and not hasattr(meta.chunk_grid, "chunk_shape"):
        # zarr's rectilinear grid (chunks of varying sides along an axis), an extension
        # that zarr-python itself reads only when a setting enables it
        described: Any = getattr(meta.chunk_grid, "to_dict", dict)()
        grid_name = described.get("name", "irregular")
        raise InvalidMetadataError(
            name, "chunk_grid", "a regular chunk grid (other grids are not supported)", grid_name
        )
    grid = meta.chunks if meta.zarr_format == 2 else meta.chunk_grid.chunk_shape
    chunk_shape = tuple(int(c) for c in grid)
    if any(c < 1 for c in chunk_shape):
        field = "chunks" if meta.zarr_format == 2 else "chunk_grid.configuration.chunk_shape"
        raise InvalidMetadataError(name, field, "chunk sides of at least 1", list(chunk_shape))
    transformers = getattr(meta, "storage_transformers", ())
    if transformers:
        # the zarr v3 specification: a storage transformer the reader does not know makes
        # the array unreadable (it may move or change every stored byte)
        raise InvalidMetadataError(
            name, "storage_transformers", "none (none are supported)", list(transformers)
        )

    def delegate(reason: str) -> ArrayLayout:
        shards = getattr(array, "shards", None)
        return ArrayLayout(
            chunk_shape=tuple(int(c) for c in array.chunks),
            shard_shape=tuple(shards) if shards else None,
            chunk=None,
            shard_index=None,
            delegate_reason=reason,
            **common,
        )

    def readable(
        chunk: ChunkFormat,
        shard_shape: tuple[int, ...] | None = None,
        shard_index: ShardIndexFormat | None = None,
    ) -> ArrayLayout:
        return ArrayLayout(
            chunk_shape=chunk.shape,
            shard_shape=shard_shape,
            chunk=chunk,
            shard_index=shard_index,
            delegate_reason=None,
            **common,
        )

    if dtype.kind not in "biufc?" or dtype.fields is not None:
        return delegate(f"dtype {dtype} is read by zarr-python")
    if meta.zarr_format == 2:
        if meta.filters:
            return delegate("zarr v2 filters are applied by zarr-python")
        codecs = () if meta.compressor is None else (from_numcodecs(meta.compressor),)
        chunk = ChunkFormat(
            chunk_shape, np.dtype(meta.dtype.to_native_dtype()), meta.order, None, codecs
        )
        return readable(chunk)

    parsed = _parse_v3_chain(meta.codecs, chunk_shape, dtype)
    if isinstance(parsed, str):
        return delegate(parsed)
    transpose, array_bytes, byte_codecs = parsed
    if type(array_bytes).__name__ == "ShardingCodec":
        if byte_codecs or transpose:
            return delegate("codecs around the sharding codec are applied by zarr-python")
        shard_shape = chunk_shape
        inner_shape = tuple(int(c) for c in array_bytes.chunk_shape)
        inner = _parse_v3_chain(array_bytes.codecs, inner_shape, dtype)
        if isinstance(inner, str) or type(inner[1]).__name__ != "BytesCodec":
            return delegate(inner if isinstance(inner, str) else "nested sharding")
        index = _index_format(array_bytes, shard_shape, inner_shape)
        if isinstance(index, str):
            return delegate(index)
        chunk = ChunkFormat(inner_shape, _with_endian(dtype, inner[1]), "C", inner[0], inner[2])
        return readable(chunk, shard_shape, index)
    if type(array_bytes).__name__ != "BytesCodec":
        return delegate(f"array-to-bytes codec {type(array_bytes).__name__}")
    return readable(
        ChunkFormat(chunk_shape, _with_endian(dtype, array_bytes), "C", transpose, byte_codecs)
    )


def _parse_v3_chain(
    codecs: Any, shape: tuple[int, ...], dtype: np.dtype
) -> tuple[tuple[int, ...] | None, Any, tuple[ByteCodec, ...]] | str:
    transpose = None
    array_bytes = None
    byte_codecs: list[ByteCodec] = []
    for codec in codecs:
        cls = type(codec).__name__
        if array_bytes is None:
            if cls == "TransposeCodec":
                order = tuple(int(i) for i in codec.order)
                transpose = order if transpose is None else tuple(transpose[i] for i in order)
                continue
            if cls in ("BytesCodec", "ShardingCodec"):
                array_bytes = codec
                continue
            return f"codec {cls} is applied by zarr-python"
        translated = from_v3_codec(codec)
        if translated is None:
            return f"codec {cls} is applied by zarr-python"
        byte_codecs.append(translated)
    if array_bytes is None:
        return "no array-to-bytes codec"
    if transpose == tuple(range(len(shape))):
        transpose = None
    return transpose, array_bytes, tuple(byte_codecs)


def _with_endian(dtype: np.dtype, bytes_codec: Any) -> np.dtype:
    endian = getattr(bytes_codec, "endian", None)
    endian = getattr(endian, "value", endian)
    if dtype.itemsize == 1 or endian is None:
        return dtype
    return dtype.newbyteorder("<" if endian == "little" else ">")


def _index_format(
    sharding: Any, shard_shape: tuple[int, ...], inner_shape: tuple[int, ...]
) -> ShardIndexFormat | str:
    names = [type(c).__name__ for c in sharding.index_codecs]
    if names not in (["BytesCodec"], ["BytesCodec", "Crc32cCodec"]):
        return f"shard index codecs {names}"
    endian = getattr(sharding.index_codecs[0].endian, "value", sharding.index_codecs[0].endian)
    location = getattr(sharding.index_location, "value", sharding.index_location)
    per_shard = tuple(s // i for s, i in zip(shard_shape, inner_shape, strict=True))
    return ShardIndexFormat(str(location), endian != "big", len(names) == 2, per_shard)
