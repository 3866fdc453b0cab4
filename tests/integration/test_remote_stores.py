"""Remote stores through fsspec: an S3 server (moto) and static HTTP servers with and
without byte-range support, all local (127.0.0.1, free ports), started once per module.

A server that ignores ranges answers every request with the whole object: the source
must cut the bytes it asked for from it, and fetch each shard once per fetch rather than
once per range (the request counts below prove it).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec

import linumpy_gpu as lg
from linumpy_gpu.io.sources import ByteRequest, ZarrStoreSource
from tests.conftest import to_numpy
from tests.helpers.servers import HttpServer, S3Server, free_port, http_server, moto_s3_server
from tests.helpers.writers import volume
from tests.helpers.zarr_images import write_image_with_zarr

DATA = volume((32, 48, 64), seed=3)
REGION = np.s_[5:27, 3:40, 10:11]
REGIONS = [np.s_[0:8, 0:16, 0:16], np.s_[4:20, 10:45, 30:64], np.s_[31, :, 7]]
# one shard of 16 raw inner chunks of 512 KiB each: inner chunks (z, 0, 0) lie 1.5 MiB apart
SPREAD = volume((64, 256, 256), seed=4)
SPREAD_SHARD = "0/c/0/0/0"
# (name, where one stored object was removed, the region that then reads as the fill value)
HOLES = {
    "holes": ("0/c/1/1/1", np.s_[8:16, 16:32, 16:32]),
    "sharded-holes": ("0/c/1/0/1", np.s_[16:32, 0:32, 32:64]),
}
SHARDED = ("sharded", "v3-sharded-blosc", "spread", "sharded-holes")


def need(*modules: str) -> None:
    """Skip unless ``modules`` can be imported (the ``test`` extra installs them)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"remote-store tests need {', '.join(missing)}, which is not installed "
            "(pip install -e '.[test]')"
        )


# -- stores and servers -------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_root(tmp_path_factory) -> Path:
    """A folder of stores to serve over HTTP."""
    root = tmp_path_factory.mktemp("served")
    w = dict(device="cpu")
    lg.write_ome_zarr(root / "plain.ome.zarr", DATA, chunks=(8, 16, 16), levels=2, **w)
    lg.write_ome_zarr(
        root / "sharded.ome.zarr", DATA, chunks=(8, 16, 16), shards=(16, 32, 32), levels=2, **w
    )
    lg.write_ome_zarr(root / "v04.ome.zarr", DATA, chunks=(8, 16, 16), version="0.4", **w)
    write_image_with_zarr(
        str(root / "v2-blosc.ome.zarr"),
        DATA,
        zarr_format=2,
        chunks=(8, 16, 16),
        compressors=numcodecs.Blosc("lz4", shuffle=1),
    )
    write_image_with_zarr(
        str(root / "v3-sharded-blosc.ome.zarr"),
        DATA,
        zarr_format=3,
        chunks=(8, 16, 16),
        shards=(16, 32, 32),
        compressors=[BloscCodec(cname="zstd", shuffle="bitshuffle")],
    )
    lg.write_ome_zarr(
        root / "spread.ome.zarr",
        SPREAD,
        chunks=(16, 128, 128),
        shards=(64, 256, 256),
        compressor=None,
        **w,
    )
    lg.write_ome_zarr(root / "holes.ome.zarr", DATA, chunks=(8, 16, 16), **w)
    lg.write_ome_zarr(
        root / "sharded-holes.ome.zarr", DATA, chunks=(8, 16, 16), shards=(16, 32, 32), **w
    )
    for name, (key, _) in HOLES.items():
        (root / f"{name}.ome.zarr" / key).unlink()
    return root


@pytest.fixture(scope="module", params=["ranges", "no-ranges"])
def http(request, served_root):
    """The served folder over HTTP, by a server that honours byte ranges or ignores them."""
    need("aiohttp")
    with http_server(served_root, ranges=request.param == "ranges") as server:
        yield server


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server with an empty bucket ``linumpy``."""
    need("moto", "s3fs", "aiohttp")
    import s3fs

    with moto_s3_server() as server:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options)
        fs.mkdir("linumpy")
        yield server


def expected_with_hole(name: str) -> np.ndarray:
    expected = DATA.copy()
    expected[HOLES[name][1]] = 0
    return expected


# -- HTTP -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["plain", "sharded", "v04", "v2-blosc", "v3-sharded-blosc"])
def test_http_reads_levels_regions_and_region_sets(http, served_root, name, device, xp):
    local = lg.open_ome_zarr(served_root / f"{name}.ome.zarr")
    img = lg.open_ome_zarr(f"{http.url}/{name}.ome.zarr", device)
    assert img.path == f"{http.url}/{name}.ome.zarr"
    assert len(img.levels) == len(local.levels)
    for k in range(len(local.levels)):
        whole = img[k][...]
        assert isinstance(whole, xp.ndarray)
        np.testing.assert_array_equal(to_numpy(whole), local[k][...])
    np.testing.assert_array_equal(to_numpy(img[0][REGION]), DATA[REGION])
    for region, got in zip(REGIONS, img[0].read_regions(REGIONS), strict=True):
        np.testing.assert_array_equal(to_numpy(got), DATA[region])
    source = img[0]._reader.source
    assert isinstance(source, ZarrStoreSource)
    # only shard indexes and inner chunks are asked for by range
    assert source.ignores_ranges == ((not http.ranges) if name in SHARDED else None)


def test_http_requests_per_read_a_shard_at_most_twice(http):
    """A region of four inner chunks 1.5 MiB apart in one shard: four ranged requests
    where the server honours ranges; where it does not, the index request brings the
    whole shard, and so does one request for the four chunks."""
    img = lg.open_ome_zarr(f"{http.url}/spread.ome.zarr")
    shard = f"/spread.ome.zarr/{SPREAD_SHARD}"
    for _ in range(2):  # every read: its own requests (indexes are trusted for one read)
        http.log.clear()
        np.testing.assert_array_equal(img[0][:, 0:128, 0:128], SPREAD[:, 0:128, 0:128])
        # and the array's metadata, before and after: the store may have been replaced
        metadata = [r for r in http.log.gets() if r.path.endswith("/0/zarr.json")]
        assert len(metadata) == 2
        gets = [r for r in http.log.gets() if r not in metadata]
        assert {r.path for r in gets} == {shard}
        if http.ranges:
            assert len(gets) == 1 + 4
            assert all(r.range is not None and r.status == 206 for r in gets)
        else:
            assert len(gets) == 2
            assert all(r.status == 200 for r in gets)
    http.log.clear()
    np.testing.assert_array_equal(img[0][...], SPREAD)  # 16 inner chunks
    assert len(http.log.gets(shard)) == 2


def test_http_whole_level_of_many_shards_fetches_each_shard_once_for_its_chunks(http):
    img = lg.open_ome_zarr(f"{http.url}/sharded.ome.zarr")
    http.log.clear()
    np.testing.assert_array_equal(img[0][...], DATA)
    gets = [r for r in http.log.gets() if not r.path.endswith("zarr.json")]
    shards = {r.path for r in gets}
    assert len(shards) == 2 * 2 * 2  # of 8 inner chunks each: 64 chunks
    for shard in shards:
        assert len(http.log.gets(shard)) == 2  # its index, then its chunks
    assert all((r.status == 206) == http.ranges for r in gets)


def test_source_cuts_every_range_from_one_whole_object_request(http, served_root):
    """Ranges of one object, the source's first fetch and a later one: where the server
    ignores ranges, the first fetch learns it from its first answer (the other ranges wait
    for it; only the whole-object request went out beside it), and every later fetch asks
    for the object once."""
    store = zarr.storage.FsspecStore.from_url(f"{http.url}/spread.ome.zarr", read_only=True)
    source = ZarrStoreSource(store)
    assert source.ignores_ranges is None
    blob = (served_root / "spread.ome.zarr" / SPREAD_SHARD).read_bytes()
    step = len(blob) // 20
    requests = [ByteRequest(SPREAD_SHARD, offset, 1000) for offset in range(0, 20 * step, step)]
    requests += [
        ByteRequest(SPREAD_SHARD, len(blob) - 10, 1000),  # past the end: cut short
        ByteRequest(SPREAD_SHARD, suffix=77),
        ByteRequest(SPREAD_SHARD),
        ByteRequest("0/c/9/9/9", 0, 10),  # no such object
    ]
    expected = [blob[r.offset : r.offset + (r.length or 0)] for r in requests[:21]]
    expected += [blob[-77:], blob, None]
    shard = f"/spread.ome.zarr/{SPREAD_SHARD}"
    for fetch, requests_if_ignored in [("first", 2), ("later", 1)]:
        http.log.clear()
        got = source.fetch(requests)
        assert [None if g is None else bytes(g) for g in got] == expected, fetch
        assert source.ignores_ranges == (not http.ranges)
        assert len(http.log.gets(shard)) == (23 if http.ranges else requests_if_ignored), fetch
        assert [r.status for r in http.log.gets("/spread.ome.zarr/0/c/9/9/9")] == [404]


@pytest.mark.parametrize("name", HOLES)
def test_http_missing_chunk_or_shard_reads_as_the_fill_value(http, name):
    img = lg.open_ome_zarr(f"{http.url}/{name}.ome.zarr")
    http.log.clear()
    np.testing.assert_array_equal(img[0][...], expected_with_hole(name))
    assert [r.path for r in http.log.gets() if r.status == 404] == [
        f"/{name}.ome.zarr/{HOLES[name][0]}"
    ]
    assert not img[0][HOLES[name][1]].any()


@pytest.mark.parametrize(
    ("fault", "error", "says"),
    [
        (403, lg.StorePermissionError, "access denied"),
        (500, lg.RemoteStoreError, "HTTP 500"),
        ("drop", lg.RemoteStoreError, "could not be reached"),
    ],
)
@pytest.mark.parametrize("name", ["plain", "sharded"])
def test_http_failed_request_mid_read_names_the_object(http, name, fault, error, says):
    img = lg.open_ome_zarr(f"{http.url}/{name}.ome.zarr")
    path = f"/{name}.ome.zarr/0/c/1/1/1"
    http.faults[path] = fault
    try:
        with pytest.raises(error, match=says) as info:
            img[0][...]
    finally:
        del http.faults[path]
    assert f"{http.url}{path}" in str(info.value)
    assert info.value.__cause__ is not None
    np.testing.assert_array_equal(img[0][...], DATA)  # the server well again: reads again


def test_http_server_gone_between_reads_is_a_remote_store_error(served_root):
    need("aiohttp")
    with http_server(served_root, ranges=True) as server:
        img = lg.open_ome_zarr(f"{server.url}/sharded.ome.zarr")
        np.testing.assert_array_equal(img[0][0:8], DATA[0:8])
    with pytest.raises(lg.RemoteStoreError, match=re.escape(server.url)) as info:
        img[0][...]
    assert isinstance(info.value, ConnectionError)


def test_unreachable_http_server_is_a_remote_store_error():
    need("aiohttp")
    url = f"http://127.0.0.1:{free_port()}/x.ome.zarr"
    with pytest.raises(lg.RemoteStoreError, match=re.escape(url)):
        lg.open_ome_zarr(url)


def test_writing_over_http_is_refused_before_any_request(http):
    http.log.clear()
    with pytest.raises(lg.InvalidArgumentError, match="read-only"):
        lg.write_ome_zarr(f"{http.url}/new.ome.zarr", DATA, device="cpu")
    assert http.log.entries == []


def test_opening_an_http_store_for_region_writes_is_refused(http):
    with pytest.raises(lg.InvalidArgumentError, match="read-only"):
        lg.open_ome_zarr(f"{http.url}/plain.ome.zarr", mode="r+")


# -- S3 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shards", [None, (16, 32, 32)], ids=["unsharded", "sharded"])
def test_s3_round_trip_written_by_us(s3: S3Server, shards, device, xp):
    options = s3.storage_options
    url = f"s3://linumpy/ours-{'sharded' if shards else 'plain'}-{device}.ome.zarr"
    written = lg.write_ome_zarr(
        url, DATA, chunks=(8, 16, 16), shards=shards, levels=2, storage_options=options
    )
    assert written.path == url
    np.testing.assert_array_equal(written[0][...], DATA)
    img = lg.open_ome_zarr(url, device, storage_options=options)
    whole = img[0][...]
    assert isinstance(whole, xp.ndarray)
    np.testing.assert_array_equal(to_numpy(whole), DATA)
    np.testing.assert_array_equal(to_numpy(img[0][REGION]), DATA[REGION])
    for region, got in zip(REGIONS, img[0].read_regions(REGIONS), strict=True):
        np.testing.assert_array_equal(to_numpy(got), DATA[region])
    theirs = zarr.open_group(url, mode="r", storage_options=options)
    np.testing.assert_array_equal(theirs["0"][...], DATA)
    np.testing.assert_array_equal(theirs["1"][...], to_numpy(img[1][...]))
    source = img[0]._reader.source
    if isinstance(source, ZarrStoreSource):
        assert not source.ignores_ranges  # S3 honours ranges


def test_s3_existing_store_is_replaced_only_with_overwrite(s3: S3Server):
    import s3fs

    options = s3.storage_options
    url = "s3://linumpy/replaced.ome.zarr"
    lg.write_ome_zarr(url, DATA, chunks=(8, 16, 16), storage_options=options, device="cpu")
    # an object whose key is the store's own name is the user's, not part of the store
    fs = s3fs.S3FileSystem(**options)
    fs.pipe("linumpy/replaced.ome.zarr", b"notes")
    with pytest.raises(lg.StoreExistsError):
        lg.write_ome_zarr(url, DATA[::-1], storage_options=options, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(url, storage_options=options)[0][...], DATA)
    lg.write_ome_zarr(url, DATA[::-1], storage_options=options, overwrite=True, device="cpu")
    np.testing.assert_array_equal(
        lg.open_ome_zarr(url, storage_options=options)[0][...], DATA[::-1]
    )
    fs.invalidate_cache()
    assert fs.cat_file("linumpy/replaced.ome.zarr") == b"notes"


def test_an_old_s3_handle_refuses_to_read_a_replaced_or_removed_store(s3: S3Server):
    """Object stores tell no versions: an image opened before its store was replaced with
    another dtype, or removed, refuses to read (in this process and in dask tasks) rather
    than read the new bytes as the old dtype, or fill values."""
    import s3fs

    options = s3.storage_options
    url = "s3://linumpy/stale.ome.zarr"
    lg.write_ome_zarr(url, DATA, chunks=(8, 16, 16), storage_options=options, device="cpu")
    old = lg.open_ome_zarr(url, storage_options=options)[0]
    lazy = old.to_dask()
    lg.write_ome_zarr(
        url, DATA.astype("i2"), chunks=(8, 16, 16), storage_options=options, overwrite=True
    )
    for read in (old.read, lambda: old[0:4], lazy.compute):
        with pytest.raises(lg.StoreError, match="replaced"):
            read()
    again = lg.open_ome_zarr(url, storage_options=options)[0]
    s3fs.S3FileSystem(**options).rm("linumpy/stale.ome.zarr", recursive=True)
    with pytest.raises(lg.StoreError, match="replaced|removed"):
        again.read()


def test_an_unreachable_s3_server_is_a_remote_store_error():
    need("moto", "s3fs", "aiohttp")
    with moto_s3_server() as server:
        options = server.storage_options
        url = "s3://linumpy-gone/gone.ome.zarr"
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True, **options).mkdir("linumpy-gone")
        lg.write_ome_zarr(url, DATA, storage_options=options, device="cpu")
        level = lg.open_ome_zarr(url, storage_options=options)[0]
    options = {**options, "config_kwargs": {"retries": {"max_attempts": 1}}}
    with pytest.raises(lg.RemoteStoreError, match="could not be reached"):
        level.read()
    with pytest.raises(lg.RemoteStoreError, match="could not be reached"):
        lg.open_ome_zarr(url, storage_options=options)


@pytest.mark.parametrize(
    ("zarr_format", "shards", "compressors"),
    [
        (3, None, "auto"),
        (3, (16, 32, 32), [BloscCodec(cname="lz4", shuffle="shuffle")]),
        (2, None, numcodecs.Blosc("zstd", shuffle=2)),
    ],
    ids=["v3", "v3-sharded-blosc", "v2-blosc"],
)
def test_s3_store_written_by_zarr_python_reads_equal(
    s3: S3Server, zarr_format, shards, compressors
):
    options = s3.storage_options
    url = f"s3://linumpy/theirs-v{zarr_format}-{'sharded' if shards else 'plain'}.ome.zarr"
    write_image_with_zarr(
        url,
        DATA,
        zarr_format=zarr_format,
        chunks=(8, 16, 16),
        shards=shards,
        compressors=compressors,
        storage_options=options,
    )
    img = lg.open_ome_zarr(url, storage_options=options)
    np.testing.assert_array_equal(img[0][...], DATA)
    np.testing.assert_array_equal(img[0][REGION], DATA[REGION])
    for region, got in zip(REGIONS, img[0].read_regions(REGIONS), strict=True):
        np.testing.assert_array_equal(got, DATA[region])


def test_s3_missing_object_reads_as_the_fill_value(s3: S3Server):
    import s3fs

    options = s3.storage_options
    url = "s3://linumpy/s3-holes.ome.zarr"
    lg.write_ome_zarr(url, DATA, chunks=(8, 16, 16), storage_options=options, device="cpu")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.rm(f"linumpy/s3-holes.ome.zarr/{HOLES['holes'][0]}")
    img = lg.open_ome_zarr(url, storage_options=options)
    np.testing.assert_array_equal(img[0][...], expected_with_hole("holes"))


def test_s3_missing_bucket_is_not_found(s3: S3Server):
    with pytest.raises(lg.StoreNotFoundError, match="no-such-bucket"):
        lg.open_ome_zarr("s3://no-such-bucket/x.ome.zarr", storage_options=s3.storage_options)


def test_s3_without_credentials_says_how_to_read_public_data(s3: S3Server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    options = {"endpoint_url": s3.endpoint, "skip_instance_cache": True}
    with pytest.raises(lg.RemoteStoreError, match="anon"):
        lg.open_ome_zarr("s3://linumpy/ours-plain-cpu.ome.zarr", storage_options=options)


def test_server_helpers_are_what_the_tests_assume(served_root):
    """The no-range server answers a Range request with the whole file and 200; the other
    with the bytes asked for and 206 (checked with a plain HTTP client)."""
    import urllib.request

    blob = (served_root / "spread.ome.zarr" / SPREAD_SHARD).read_bytes()
    for ranges in (True, False):
        server = HttpServer(served_root, ranges)
        try:
            for header, part in [("bytes=-100", blob[-100:]), ("bytes=10-19", blob[10:20])]:
                req = urllib.request.Request(
                    f"{server.url}/spread.ome.zarr/{SPREAD_SHARD}", headers={"Range": header}
                )
                with urllib.request.urlopen(req) as answer:
                    assert answer.status == (206 if ranges else 200)
                    assert answer.read() == (part if ranges else blob)
        finally:
            server.stop()


def test_replacing_a_remote_store_that_a_lazy_array_reads_is_refused():
    """An object store is removed before its replacement is written: data read lazily
    from it would read fill values, so the write is refused and the store kept."""
    url = "memory://refuse-replace/y.zarr"
    lg.write_ome_zarr(url, DATA, device="cpu")
    level = lg.open_ome_zarr(url)[0]
    import dask.array as da

    lazy_reads = (
        level.to_dask() * 1,
        da.from_zarr(url + "/0") * 1,  # dask's own readers of the same store
        da.from_array(level, chunks=8) * 1,
    )
    for data in (*lazy_reads, level, zarr.open_array(url + "/0", mode="r")):
        with pytest.raises(lg.WriteError, match="reads from"):
            lg.write_ome_zarr(url, data, overwrite=True, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], DATA)
    lazy = level.to_dask() * 1
    labels = lg.write_labels(url, "cells", lazy.astype("u4"), device="cpu")  # another path
    np.testing.assert_array_equal(labels[0][...], DATA.astype("u4"))
    relabel = labels[0].to_dask() + 1
    with pytest.raises(lg.WriteError, match="reads from"):
        lg.write_labels(url, "cells", relabel, overwrite=True, device="cpu")


def test_replacing_a_store_object_that_a_lazy_array_reads_is_refused():
    """The same for a store passed as an object, read through a zarr.Group of it."""
    store = zarr.storage.MemoryStore()
    lg.write_ome_zarr(store, DATA, device="cpu")
    lazy = lg.open_ome_zarr(zarr.open_group(store, mode="r"))[0].to_dask() + 1
    with pytest.raises(lg.WriteError, match="reads from"):
        lg.write_ome_zarr(store, lazy, overwrite=True, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(store)[0][...], DATA)


def test_replacing_local_files_through_a_store_object_that_a_lazy_array_reads_is_refused(
    tmp_path,
):
    """A local image read lazily and written back over its own folder given as an fsspec
    store object (which is not built beside, so it would be emptied first)."""
    path = tmp_path / "a.ome.zarr"
    lg.write_ome_zarr(path, DATA, device="cpu")
    lazy = lg.open_ome_zarr(path)[0].to_dask() + 1
    store = zarr.storage.FsspecStore.from_url(f"file://{path}")
    with pytest.raises(lg.WriteError, match="reads from"):
        lg.write_ome_zarr(store, lazy, overwrite=True, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr(path)[0][...], DATA)


def test_an_old_remote_handle_refuses_writes_into_a_store_of_another_layout():
    url = "memory://stale-handle/a.zarr"
    lg.write_ome_zarr(url, DATA, device="cpu")
    old = lg.open_ome_zarr(url, mode="r+")
    lg.write_ome_zarr(url, DATA + 1, overwrite=True, chunks=(8, 8, 8), device="cpu")
    with pytest.raises(lg.StoreError, match="replaced"):
        old[0][0:8, 0:8, 0:8] = np.zeros((8, 8, 8), DATA.dtype)
    np.testing.assert_array_equal(lg.open_ome_zarr(url)[0][...], DATA + 1)


def test_chained_urls_are_read_and_refused_for_writing(tmp_path, monkeypatch):
    """fsspec's chained URLs ('simplecache::memory://...') read through fsspec; writes
    through them are refused, never taken for a local folder of that name."""
    monkeypatch.chdir(tmp_path)
    lg.write_ome_zarr("memory://chained/z.zarr", DATA, device="cpu")
    img = lg.open_ome_zarr("simplecache::memory://chained/z.zarr")
    np.testing.assert_array_equal(img[0][...], DATA)
    np.testing.assert_array_equal(img[0].to_dask().compute(), DATA)
    with pytest.raises(lg.InvalidArgumentError, match="chained fsspec URL"):
        lg.write_ome_zarr("simplecache::memory://chained/w.zarr", DATA, device="cpu")
    assert list(tmp_path.iterdir()) == []


def test_storage_options_mistakes_are_argument_errors(s3: S3Server):
    options = {**s3.storage_options, "endpointurl": "typo"}
    for call in (
        lambda: lg.open_ome_zarr("s3://linumpy/any.zarr", storage_options=options),
        lambda: lg.write_ome_zarr("s3://linumpy/new.zarr", DATA, storage_options=options),
    ):
        with pytest.raises(lg.InvalidArgumentError, match="storage_options for 's3://"):
            call()


def test_url_schemes_are_case_insensitive():
    lg.write_ome_zarr("memory://cased/a.zarr", DATA, device="cpu")
    np.testing.assert_array_equal(lg.open_ome_zarr("Memory://cased/a.zarr")[0][...], DATA)


@pytest.mark.parametrize("inside", ["0/notes.txt", "0/c/0/0/0.bak", "0/c/0/0/0"])
def test_an_object_among_a_remote_levels_chunks_blocks_a_replacement_unless_a_chunk(inside):
    import fsspec

    url = f"memory://foreign-in-level/{inside.replace('/', '_')}.zarr"
    lg.write_ome_zarr(url, DATA, chunks=(8, 16, 16), levels=1, device="cpu")
    fs = fsspec.filesystem("memory")
    key = url.removeprefix("memory:/") + "/" + inside
    is_chunk = fs.exists(key)  # the last case names a chunk the write made
    if not is_chunk:
        fs.pipe(key, b"weeks of work")
        with pytest.raises(lg.StoreExistsError, match="not part of a zarr store"):
            lg.write_ome_zarr(url, DATA[::-1], levels=1, overwrite=True, device="cpu")
        assert fs.cat_file(key) == b"weeks of work"
        return
    img = lg.write_ome_zarr(url, DATA[::-1], levels=1, overwrite=True, device="cpu")
    np.testing.assert_array_equal(img[0][...], DATA[::-1])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_users_array_inside_a_remote_level_blocks_a_replacement(zarr_format):
    url = f"memory://array-in-level-{zarr_format}/img.zarr"
    lg.write_ome_zarr(url, DATA, chunks=(8, 16, 16), levels=1, device="cpu")
    mine = zarr.create_array(
        url + "/0/mine", shape=(4,), dtype="u1", zarr_format=zarr_format, fill_value=0
    )
    mine[...] = 7
    with pytest.raises(lg.StoreExistsError, match="0/mine"):
        lg.write_ome_zarr(url, DATA[::-1], levels=1, overwrite=True, device="cpu")
    assert (zarr.open_array(url + "/0/mine", mode="r")[...] == 7).all()
