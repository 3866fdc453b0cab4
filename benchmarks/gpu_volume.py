"""Make benchmark volumes quickly: chunks generated and zstd-compressed on a thread pool."""

from __future__ import annotations

import itertools
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numcodecs
import numpy as np
import zarr
from zarr.codecs import ZstdCodec


def chunk_data(coords, chunk_shape, dtype="u2") -> np.ndarray:
    """Smooth structure plus 8 bits of noise: zstd level 3 ratio about 1.55 on uint16."""
    rng = np.random.default_rng(hash(coords) & 0xFFFFFFFF)
    z0 = coords[0] * chunk_shape[0]
    base = (2000 + 500 * np.sin((z0 + np.arange(chunk_shape[0])) / 37.0)).astype(np.uint16)
    noise = rng.integers(0, 256, size=chunk_shape, dtype=np.uint16)
    return (noise + base.reshape((-1,) + (1,) * (len(chunk_shape) - 1))).astype(dtype)


def make_volume(
    path: str,
    shape=(2048, 1024, 1024),
    chunks=(128, 128, 128),
    shards=None,
    level: int = 3,
    threads: int = 0,
) -> str:
    """An NGFF 0.5 image at ``path`` with level 0 as described; returns the array path."""
    array_path = os.path.join(path, "0")
    if os.path.exists(os.path.join(array_path, "zarr.json")):
        return array_path
    root = zarr.open_group(path, mode="w", zarr_format=3)
    inner = chunks
    arr = root.create_array(
        "0",
        shape=shape,
        dtype="u2",
        chunks=inner,
        shards=shards,
        compressors=[ZstdCodec(level=level)],
        fill_value=0,
    )
    axes = [{"name": n, "type": "space", "unit": "micrometer"} for n in "zyx"]
    ds = [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0, 1.0]}]}]
    root.attrs["ome"] = {"version": "0.5", "multiscales": [{"axes": axes, "datasets": ds}]}
    grid = shards or chunks
    n_grid = [-(-s // c) for s, c in zip(shape, grid, strict=True)]
    codec = numcodecs.Zstd(level=level)

    def write_unsharded(coords):
        d = chunk_data(coords, chunks)
        key = "/".join(["c", *map(str, coords)])
        target = os.path.join(array_path, *key.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(codec.encode(d))

    def write_shard(coords):
        region = tuple(
            slice(c * g, min((c + 1) * g, s)) for c, g, s in zip(coords, grid, shape, strict=True)
        )
        block = np.empty(tuple(r.stop - r.start for r in region), dtype="u2")
        per = [g // c for g, c in zip(grid, chunks, strict=True)]
        for inner_c in itertools.product(*(range(p) for p in per)):
            gc = tuple(c * p + i for c, p, i in zip(coords, per, inner_c, strict=True))
            sl = tuple(
                slice(i * c, min((i + 1) * c, n))
                for i, c, n in zip(inner_c, chunks, block.shape, strict=True)
            )
            part = block[sl]
            if part.size:
                part[...] = chunk_data(gc, chunks)[tuple(slice(0, m) for m in part.shape)]
        arr[region] = block

    work = write_shard if shards else write_unsharded
    with ThreadPoolExecutor(threads or os.cpu_count()) as pool:
        list(pool.map(work, itertools.product(*(range(n) for n in n_grid))))
    return array_path


def probe_main(probe, chunks: list[str], batches: str) -> None:
    """Command line of the nvCOMP probes: ``probe(shape, batch_sizes, repeat)`` per chunk
    shape (``--chunks``), batch sizes (``--batches``) scaled so that every chunk shape
    decodes as many bytes per batch as 4 MiB chunks would; rows to ``--json``."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", nargs="+", default=chunks)
    ap.add_argument("--batches", default=batches)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [int(b) for b in args.batches.split(",")]
    rows = []
    for spec in args.chunks:
        shape = tuple(int(x) for x in spec.split(","))
        scale = max(1, (4 << 20) // (int(np.prod(shape)) * 2))
        rows += probe(shape, [n * scale for n in sizes], args.repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    import sys

    print(json.dumps(make_volume(sys.argv[1])))


def make_uncompressed_copy(array_path: str, target: str, threads: int = 0) -> str:
    """The same (unsharded) array with no compressor, for readers of raw bytes (kvikio)."""
    if os.path.exists(os.path.join(target, "zarr.json")):
        return target
    src = zarr.open_array(array_path, mode="r")
    zarr.create_array(
        target,
        shape=src.shape,
        dtype=src.dtype,
        chunks=src.chunks,
        compressors=None,
        fill_value=0,
        overwrite=True,
    )
    codec = numcodecs.Zstd()
    files = [
        os.path.relpath(os.path.join(d, f), array_path)
        for d, _, fs in os.walk(array_path)
        for f in fs
        if f != "zarr.json"
    ]

    def copy(rel):
        with open(os.path.join(array_path, rel), "rb") as f:
            raw = codec.decode(f.read())
        out = os.path.join(target, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(raw)

    with ThreadPoolExecutor(threads or os.cpu_count()) as pool:
        list(pool.map(copy, files))
    return target
