"""How many chunks of a batch go to host threads: measured balance, within bounds."""

from __future__ import annotations

from linumpy_gpu.gpu.host_decode import MAX_SHARE, HostDecoder, HostUnits

MiB = 1 << 20


def _units(count: int, nbytes: int = 4 * MiB) -> HostUnits:
    return HostUnits([], [], count, nbytes, 0.0)


def test_no_threads_no_share():
    assert HostDecoder(0, 0).chunks_per_batch(4 * MiB) == 0


def test_first_guess_gives_every_thread_work():
    decoder = HostDecoder(0, 4)
    assert decoder.chunks_per_batch(64 * MiB) == 4
    assert decoder.chunks_per_batch(64 << 10) > 4


def test_share_follows_which_side_finished_first():
    decoder = HostDecoder(0, 4)
    decoder.balance(_units(40), host_seconds=0.080, gpu_seconds=0.040)  # host was late
    shrunk = decoder.chunks_per_batch(4 * MiB)
    assert 20 <= shrunk < 40
    for _ in range(5):  # host keeps finishing early: the share grows, step by step
        decoder.balance(_units(shrunk), host_seconds=0.010, gpu_seconds=0.040)
        grown = decoder.chunks_per_batch(4 * MiB)
        assert shrunk < grown <= 2 * shrunk
        shrunk = grown
    for _ in range(40):
        decoder.balance(_units(shrunk), host_seconds=0.010, gpu_seconds=0.040)
        shrunk = decoder.chunks_per_batch(4 * MiB)
    assert shrunk == MAX_SHARE
    decoder.balance(_units(30), host_seconds=0.040, gpu_seconds=0.0)  # no GPU part: no news
    assert decoder.chunks_per_batch(4 * MiB) == shrunk
    # other chunk sizes keep their own share
    assert decoder.chunks_per_batch(512 << 10) != shrunk


def test_balance_converges_to_equal_times():
    decoder = HostDecoder(0, 8)
    per_chunk, gpu = 0.002, 0.040  # host: 2 ms per chunk over the pool; GPU: 40 ms a batch
    for _ in range(30):
        n = decoder.chunks_per_batch(4 * MiB)
        decoder.balance(_units(n), host_seconds=n * per_chunk, gpu_seconds=gpu)
    assert abs(decoder.chunks_per_batch(4 * MiB) - 20) <= 1
