"""Locate and load libnvcomp (the C library shipped in the nvidia-libnvcomp wheels)."""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
from functools import lru_cache
from typing import Any

from linumpy_gpu.errors import NvcompError


@lru_cache(maxsize=1)
def find_libnvcomp() -> str:
    """Path of libnvcomp.so: the ``nvcomp_library`` setting, the pip wheels, then the
    system."""
    from linumpy_gpu import config

    override = config.get().nvcomp_library
    if override:
        if not os.path.exists(override):
            raise FileNotFoundError(
                f"the nvcomp_library setting names {override}, which does not exist"
            )
        return override
    for package in ("nvidia.libnvcomp", "nvidia.nvcomp"):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            hits = sorted(glob.glob(os.path.join(root, "**", "libnvcomp.so*"), recursive=True))
            if hits:
                return hits[-1]
    import sys

    for entry in sys.path:
        hits = sorted(
            glob.glob(os.path.join(entry, "nvidia", "libnvcomp", "lib*", "libnvcomp.so*"))
        )
        if hits:
            return hits[-1]
    import ctypes.util

    found = ctypes.util.find_library("nvcomp")
    if found:
        return found
    raise FileNotFoundError("libnvcomp.so not found (no nvidia-libnvcomp wheel installed)")


@lru_cache(maxsize=1)
def load_libnvcomp() -> ctypes.CDLL:
    try:  # load the CUDA runtime through cupy first, so libnvcomp's dependency resolves
        import cupy

        cupy.cuda.runtime.runtimeGetVersion()
    except Exception:
        pass
    return ctypes.CDLL(find_libnvcomp())


# --- the batched C API (nvCOMP >= 5: option structs passed by value) -------------------

NVCOMP_SUCCESS = 0
c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p


class DecompressOpts(ctypes.Structure):
    """nvCOMP's batched decompression options (zeroed: the default backend)."""

    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


class CompressOpts(ctypes.Structure):
    """nvCOMP's batched compression options (zeroed: the defaults)."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


class Alignments(ctypes.Structure):
    """The address alignments nvCOMP requires of input, output and workspace buffers."""

    _fields_ = [("input", c_size_t), ("output", c_size_t), ("temp", c_size_t)]


class Properties(ctypes.Structure):
    """nvCOMP's version and the CUDA runtime version it was built with."""

    _fields_ = [("version", ctypes.c_uint32), ("cudart_version", ctypes.c_uint32)]


_DECOMPRESS_SIG = {
    "DecompressGetRequiredAlignments": [DecompressOpts, c_void_p],
    "DecompressGetTempSize": [c_size_t, c_size_t, DecompressOpts, c_void_p, c_size_t, c_void_p],
    "DecompressAsync": [
        c_void_p,
        c_void_p,
        c_void_p,
        c_void_p,
        c_size_t,
        c_void_p,
        c_size_t,
        c_void_p,
        DecompressOpts,
        c_void_p,
        c_void_p,
    ],
}
_COMPRESS_SIG = {
    "CompressGetTempSize": [c_size_t, c_size_t, CompressOpts, c_void_p, c_size_t, c_void_p],
    "CompressGetMaxOutputChunkSize": [c_size_t, CompressOpts, c_void_p],
    "CompressAsync": [
        c_void_p,
        c_void_p,
        c_size_t,
        c_size_t,
        c_void_p,
        c_size_t,
        c_void_p,
        c_void_p,
        CompressOpts,
        c_void_p,
        c_void_p,
    ],
}


class BatchedApi:
    """Typed entry points of one libnvcomp batched codec (``nvcompBatched<algo>...``):
    decompression, and compression where ``compress`` is set."""

    def __init__(self, lib: ctypes.CDLL, algo: str, compress: bool = False):
        self.lib = lib
        self.algo = algo
        props = Properties()
        self._check(lib.nvcompGetProperties(ctypes.byref(props)), "nvcompGetProperties")
        self.version = (props.version // 1000, (props.version % 1000) // 100, props.version % 100)
        if self.version[0] < 5:
            raise NvcompError(
                f"nvCOMP {'.'.join(map(str, self.version))} is too old: linumpy_gpu needs the "
                "nvCOMP >= 5 batched API (pip install nvidia-nvcomp-cu13 or -cu12)"
            )
        lib.nvcompGetStatusString.restype = ctypes.c_char_p
        sig = dict(_DECOMPRESS_SIG, **(_COMPRESS_SIG if compress else {}))
        self._fn = {}
        for name, argtypes in sig.items():
            fn = getattr(lib, f"nvcompBatched{algo}{name}")
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            self._fn[name] = fn
        self.dopts = DecompressOpts()  # zeroed: default backend
        self.copts = CompressOpts()
        self.decompress_alignments = self._alignments("DecompressGetRequiredAlignments", self.dopts)

    def status_string(self, status: int) -> str:
        """nvCOMP's text for status code ``status``."""
        raw = self.lib.nvcompGetStatusString(int(status))
        return raw.decode() if raw else f"nvcomp status {status}"

    def _check(self, status: int, what: str) -> None:
        if status != NVCOMP_SUCCESS:
            text = self.status_string(status) if hasattr(self, "dopts") else str(status)
            raise NvcompError(f"{what} failed: {text}")

    def _alignments(self, name: str, opts: Any) -> Alignments:
        out = Alignments()
        self._check(self._fn[name](opts, ctypes.byref(out)), f"nvcompBatched{self.algo}{name}")
        return out

    def _temp_bytes(
        self, way: str, opts: Any, n: int, max_chunk: int, total: int, stream: int
    ) -> int:
        """Workspace bytes nvCOMP's ``way`` ("Decompress" or "Compress") of a batch takes."""
        out = c_size_t(0)
        self._check(
            self._fn[f"{way}GetTempSize"](n, max_chunk, opts, ctypes.byref(out), total, stream),
            f"{self.algo} {way.lower()} temp size",
        )
        return out.value

    def decompress_temp_bytes(self, n: int, max_chunk: int, total: int, stream: int) -> int:
        """Workspace bytes a decode of ``n`` chunks of at most ``max_chunk`` bytes takes."""
        return self._temp_bytes("Decompress", self.dopts, n, max_chunk, total, stream)

    def decompress(
        self,
        comp_ptrs: int,
        comp_bytes: int,
        out_bytes: int,
        actual_bytes: int,
        n: int,
        temp: int,
        temp_bytes: int,
        out_ptrs: int,
        statuses: int,
        stream: int,
    ) -> None:
        """Queue a batched decode on ``stream`` (arguments are device addresses and counts)."""
        self._check(
            self._fn["DecompressAsync"](
                comp_ptrs,
                comp_bytes,
                out_bytes,
                actual_bytes,
                n,
                temp,
                temp_bytes,
                out_ptrs,
                self.dopts,
                statuses,
                stream,
            ),
            f"nvcompBatched{self.algo}DecompressAsync",
        )

    def compress_temp_bytes(self, n: int, max_chunk: int, total: int, stream: int) -> int:
        """Workspace bytes an encode of ``n`` chunks of at most ``max_chunk`` bytes takes."""
        return self._temp_bytes("Compress", self.copts, n, max_chunk, total, stream)

    def max_compressed_bytes(self, max_chunk: int) -> int:
        """The most bytes a chunk of ``max_chunk`` bytes can compress to."""
        out = c_size_t(0)
        self._check(
            self._fn["CompressGetMaxOutputChunkSize"](max_chunk, self.copts, ctypes.byref(out)),
            f"{self.algo} max output size",
        )
        return out.value

    def compress(
        self,
        in_ptrs: int,
        in_bytes: int,
        max_chunk: int,
        n: int,
        temp: int,
        temp_bytes: int,
        out_ptrs: int,
        out_bytes: int,
        statuses: int,
        stream: int,
    ) -> None:
        """Queue a batched encode on ``stream`` (arguments are device addresses and counts)."""
        self._check(
            self._fn["CompressAsync"](
                in_ptrs,
                in_bytes,
                max_chunk,
                n,
                temp,
                temp_bytes,
                out_ptrs,
                out_bytes,
                self.copts,
                statuses,
                stream,
            ),
            f"nvcompBatched{self.algo}CompressAsync",
        )


@lru_cache(maxsize=1)
def zstd_api() -> BatchedApi:
    """nvCOMP's batched zstd, both ways."""
    return BatchedApi(load_libnvcomp(), "Zstd", compress=True)


@lru_cache(maxsize=1)
def lz4_api() -> BatchedApi:
    """nvCOMP's batched LZ4 decoder (raw LZ4 blocks)."""
    return BatchedApi(load_libnvcomp(), "LZ4")


def nvcomp_version() -> str:
    """The loaded nvCOMP's version, as ``major.minor.patch``."""
    return ".".join(map(str, zstd_api().version))
