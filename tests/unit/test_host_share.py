"""Which reads go to host threads instead of nvCOMP: those the host finishes sooner."""

from __future__ import annotations

import math

import numpy as np
import pytest

from linumpy_gpu.gpu.host_decode import HostDecoder

MiB = 1 << 20


def test_no_threads_no_share():
    decoder = HostDecoder(0, 0)
    assert decoder.host_seconds(4 * MiB, 3) == math.inf
    assert decoder.share_of_read(4 * MiB, 3) == 0


def test_small_reads_go_to_the_host_entirely_large_ones_to_nvcomp():
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    decoder.learn_gpu(4 * MiB, 1024, 0.040)  # whole-level batches seen: 40 ms each
    for _ in range(30):
        decoder.learn_gpu(4 * MiB, 1024, 0.040)
    # a 256^3 tile of 128^3 chunks (27): 2 chunks per thread, 19 ms, against a batch's
    # time guessed at one chunk per block (35 ms)
    assert decoder.host_seconds(4 * MiB, 27) == 2 * 4 * MiB / 0.45e9
    assert decoder.share_of_read(4 * MiB, 27) == 27
    assert decoder.share_of_read(4 * MiB, 42) == 42  # 3 chunks per thread: 28 ms
    assert decoder.share_of_read(4 * MiB, 57) == 0  # 5 per thread: 47 ms
    assert decoder.share_of_read(4 * MiB, 1024) == 0  # a whole level
    assert decoder.share_of_read(4 * MiB, 0) == 0


def test_small_chunks_stay_on_nvcomp_where_its_batch_is_short():
    """A 256^3 tile of 64^3 chunks (125 chunks of 512 KiB): nvCOMP's batch is short even
    though whole-level batches of that chunk size took 40 ms; the host needs 9 chunks per
    thread (10.5 ms)."""
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    for _ in range(30):
        decoder.learn_gpu(512 << 10, 2048, 0.040)
    assert decoder.batch_seconds(512 << 10, 125) == (512 << 10) / 120e6
    assert decoder.share_of_read(512 << 10, 125) == 0
    assert decoder.share_of_read(512 << 10, 14) == 14  # one chunk per thread: 1.2 ms


def test_measured_batches_bound_the_estimate_from_both_sides():
    decoder = HostDecoder(0, 8)
    prior = decoder.batch_seconds(4 * MiB, 100)
    decoder.gpu_seconds[(4 * MiB, (20).bit_length())] = 0.050  # 20 chunks took 50 ms
    assert decoder.batch_seconds(4 * MiB, 100) == 0.050 > prior  # more chunks: no faster
    decoder.gpu_seconds[(4 * MiB, (2000).bit_length())] = 0.045  # noise: 2000 took 45 ms
    assert decoder.batch_seconds(4 * MiB, 100) == 0.045
    decoder.gpu_seconds.clear()
    decoder.gpu_seconds[(4 * MiB, (2000).bit_length())] = 0.010  # a faster GPU
    assert decoder.batch_seconds(4 * MiB, 100) == 0.010 < prior


def test_measured_nvcomp_batches_move_the_threshold():
    decoder = HostDecoder(0, 8)
    decoder.thread_rate = 0.45e9
    assert decoder.share_of_read(4 * MiB, 40) == 0  # 5 per thread: 47 ms against 35
    for _ in range(30):
        decoder.learn_gpu(4 * MiB, 40, 0.120)  # a slower GPU (or busier): the host takes more
    assert decoder.batch_seconds(4 * MiB, 40) > 0.11
    assert decoder.batch_seconds(4 * MiB, 33) > 0.11  # same bucket (33-63 chunks)
    assert decoder.share_of_read(4 * MiB, 40) == 40
    assert decoder.batch_seconds(64 << 10, 40) == 0.002  # other sizes keep their estimate


def test_large_reads_stay_on_nvcomp_whatever_was_measured():
    """Batches timed while several threads decoded at once can look slow: a full level of
    plane chunks (2048 x 2 MiB, 0.7 s on 14 threads) must not go to the host for it."""
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    for _ in range(30):
        decoder.learn_gpu(2 * MiB, 256, 1.5)  # eight tile readers at once
    assert decoder.batch_seconds(2 * MiB, 2048) >= 1.0
    assert decoder.share_of_read(2 * MiB, 256) == 256  # a tile: 93 ms on the host
    assert decoder.share_of_read(2 * MiB, 2048) == 0


def test_units_spread_over_every_thread():
    """The model's rounds are the pool's: 125 chunks of 512 KiB on 14 threads go out as 25
    units of 5 (two rounds, 10 chunks per busiest thread), not 16 units of 8 (16 chunks)."""
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    assert decoder.host_seconds(512 << 10, 125) == 10 * (512 << 10) / 0.45e9
    assert decoder.host_seconds(4 * MiB, 14) == 4 * MiB / 0.45e9
    assert decoder.host_seconds(64 << 10, 1000) == 72 * (64 << 10) / 0.45e9


def test_measured_pool_times_replace_the_model():
    """The pool's own wall time (thread wake-ups, copies, GIL) is learned like nvCOMP's: a
    read the model sends to the host but the host turns out slower on goes back to nvCOMP."""
    import time

    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    decoder.gpu_seconds[(4 * MiB, (27).bit_length())] = 0.030
    assert decoder.share_of_read(4 * MiB, 27) == 27  # model: 19 ms
    units = decoder.submit([], 4 * MiB, np.zeros(0, np.uint64), None)
    units.count, units.started = 27, time.perf_counter() - 0.060  # the pool took 60 ms
    for _ in range(10):
        decoder.wait(units, stream=None)
    assert decoder.host_seconds(4 * MiB, 27) > 0.050
    assert decoder.share_of_read(4 * MiB, 27) == 0
    assert decoder.host_seconds(4 * MiB, 100) == 8 * 4 * MiB / 0.45e9  # other sizes: model


def test_times_of_batches_decoded_at_once_are_not_learned():
    """Readers decoding at the same moment slow each other's batches down; those times
    must not send later reads to the host threads (nor away from them)."""
    decoder = HostDecoder(0, 8)
    before = decoder.batch_seconds(2 * MiB, 256)
    with decoder.decoding() as a:
        with decoder.decoding() as b:  # a second reader's batch, while the first decodes
            decoder.learn_gpu(2 * MiB, 256, 1.0, b)
        decoder.learn_gpu(2 * MiB, 256, 1.0, a)  # b is done, but it overlapped a
    assert a.overlapped and b.overlapped
    assert decoder.batch_seconds(2 * MiB, 256) == before
    with decoder.decoding() as alone:
        decoder.learn_gpu(2 * MiB, 256, 0.020, alone)
    assert not alone.overlapped
    assert decoder.batch_seconds(2 * MiB, 256) != before
    assert not decoder._decoding


def _finished_units(decoder: HostDecoder, count: int, took: float, fresh: bool):
    """HostUnits as if ``count`` one-chunk units of 4 MiB had taken ``took`` seconds."""
    import time
    from concurrent.futures import Future

    units = decoder.submit([], 4 * MiB, np.zeros(0, np.uint64), None)
    units.count, units.started = count, time.perf_counter() - took
    units.nbytes = 4 * MiB
    for i in range(count):
        future: Future = Future()
        future.set_result(({}, _NoEvent(), 0.009, 4 * MiB, fresh and i == 0))
        units.futures.append(future)
        units.first.append(i)
    return units


class _NoEvent:
    def synchronize(self) -> None:
        pass


class _Stream:
    def wait_event(self, event) -> None:
        pass


def test_a_read_in_which_a_worker_set_itself_up_is_not_timed():
    """A worker's first unit creates its stream and pinned buffers; a read that slow must
    not teach the decoder that the pool is slower than nvCOMP."""
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    key = (4 * MiB, (27).bit_length())
    decoder.wait(_finished_units(decoder, 27, 0.200, fresh=True), _Stream())
    assert key not in decoder.pool_seconds  # the decode rate itself is still learned
    assert decoder.thread_rate == pytest.approx(0.45e9 + 0.3 * (4 * MiB / 0.009 - 0.45e9))
    decoder.wait(_finished_units(decoder, 27, 0.025, fresh=False), _Stream())
    assert 0.018 < decoder.pool_seconds[key] < 0.025


def _settled(decoder: HostDecoder, key: tuple[int, int]) -> None:
    """Both sides of ``key`` timed often enough that a far slower one is left alone."""
    from linumpy_gpu.gpu.host_decode import SETTLED_AFTER

    for on_host in (True, False):
        decoder._timed[(on_host, *key)] = SETTLED_AFTER


def test_a_read_size_the_pool_lost_on_is_timed_again_now_and_then():
    from linumpy_gpu.gpu.host_decode import RETIME_EVERY

    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    key = (4 * MiB, (27).bit_length())
    _settled(decoder, key)
    decoder.gpu_seconds[key] = 0.036
    decoder.pool_seconds[key] = 0.040  # one slow early read: the pool lost
    choices = [decoder.share_of_read(4 * MiB, 27) for _ in range(2 * RETIME_EVERY)]
    assert choices.count(27) == 2 and choices[RETIME_EVERY - 1] == 27
    decoder.wait(_finished_units(decoder, 27, 0.022, fresh=False), _Stream())  # re-timed
    # a faster time moves the learned one most of the way: 27.4 ms against 36
    assert decoder.pool_seconds[key] == pytest.approx(0.040 + 0.7 * (0.022 - 0.040), abs=2e-3)
    assert decoder.share_of_read(4 * MiB, 27) == 27  # the pool again
    decoder.pool_seconds[key] = 0.080  # more than 1.5x nvCOMP's: not worth a try
    assert all(decoder.share_of_read(4 * MiB, 27) == 0 for _ in range(3 * RETIME_EVERY))


def test_a_read_size_nvcomp_lost_on_is_timed_again_now_and_then():
    """The other way round: an nvCOMP time learned from early, slow batches
    (16.8 ms for 125 chunks of 512 KiB, where later batches took 13) must not keep such
    reads on the pool (15 ms) for good."""
    from linumpy_gpu.gpu.host_decode import RETIME_EVERY

    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    size, n = 512 * 1024, 125
    key = (size, n.bit_length())
    _settled(decoder, key)
    decoder.gpu_seconds[key] = 0.0168
    decoder.pool_seconds[key] = 0.0150
    choices = [decoder.share_of_read(size, n) for _ in range(2 * RETIME_EVERY)]
    assert choices.count(0) == 2 and choices[RETIME_EVERY - 1] == 0
    decoder.learn_gpu(size, n, 0.013)  # re-timed at 13 ms: 14.1 learned
    assert decoder.share_of_read(size, n) == 0  # nvCOMP's now
    # and the pool, now the loser, gets its turn in the same rhythm
    choices = [decoder.share_of_read(size, n) for _ in range(RETIME_EVERY)]
    assert choices.count(n) == 1
    decoder.gpu_seconds[key] = 0.040  # more than 1.5x the pool's: not worth a try
    assert all(decoder.share_of_read(size, n) == n for _ in range(3 * RETIME_EVERY))


def test_a_side_timed_only_a_few_times_is_timed_again_however_far_behind():
    """nvCOMP's first batch in a process carries one-off costs: learned from it (and two
    more) the 125-chunk batch looked 20 ms against the pool's 13, more than 1.5x, where
    later batches took 13 ms. Until it has been timed SETTLED_AFTER times a side
    is tried again every RETIME_EVERY reads whatever its time; slower times then move the
    learned one only a little."""
    from linumpy_gpu.gpu.host_decode import RETIME_EVERY, SETTLED_AFTER

    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    size, n = 512 * 1024, 125
    key = (size, n.bit_length())
    decoder.learn_gpu(size, n, 0.100)  # the process's first batch
    decoder.pool_seconds[key] = 0.013
    decoder._timed[(True, *key)] = SETTLED_AFTER
    assert decoder.batch_seconds(size, n) > 1.5 * 0.013
    choices = [decoder.share_of_read(size, n) for _ in range(RETIME_EVERY)]
    assert choices.count(0) == 1  # tried again despite 2.3x
    decoder.learn_gpu(size, n, 0.012)  # 33 -> 18 ms: the pool still wins
    choices = [decoder.share_of_read(size, n) for _ in range(RETIME_EVERY)]
    assert choices.count(0) == 1  # timed twice: tried again
    decoder.learn_gpu(size, n, 0.012)  # 18 -> 14 ms, now settled and within 1.5x
    choices = [decoder.share_of_read(size, n) for _ in range(RETIME_EVERY)]
    assert choices.count(0) == 1
    decoder.learn_gpu(size, n, 0.012)
    assert decoder.batch_seconds(size, n) < 0.013  # faster times count most
    assert decoder.share_of_read(size, n) == 0
    decoder.learn_gpu(size, n, 0.100)  # a slow outlier once settled: a little
    assert decoder.batch_seconds(size, n) < 0.045


def test_a_held_answer_is_given_once_without_counting_a_read():
    """The engine asks before a read is planned whether it goes to the host; a read sent to
    nvCOMP to be timed again must get that answer for its batch too."""
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    for _ in range(31):
        decoder.learn_gpu(4 * MiB, 1024, 0.040)
    assert decoder.share_of_read(4 * MiB, 27) == 27
    lost = dict(decoder._lost)
    decoder.hold(4 * MiB, 27, 0)
    assert decoder.share_of_read(4 * MiB, 27) == 0  # the held answer, once
    assert decoder._lost == lost
    assert decoder.share_of_read(4 * MiB, 27) == 27
