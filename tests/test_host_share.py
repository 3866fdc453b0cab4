"""Which reads go to host threads instead of nvCOMP: those the host finishes sooner."""

from __future__ import annotations

from linumpy_gpu.gpu.host_decode import HostDecoder

MiB = 1 << 20


def test_no_threads_no_share():
    decoder = HostDecoder(0, 0)
    assert decoder.chunks_per_batch(4 * MiB) == 0
    assert decoder.share_of_read(4 * MiB, 3) == 0


def test_small_reads_go_to_the_host_entirely_large_ones_to_nvcomp():
    decoder = HostDecoder(0, 14)
    decoder.thread_rate = 0.45e9
    decoder.gpu_seconds[4 * MiB] = 0.040
    capacity = decoder.chunks_per_batch(4 * MiB)  # 14 threads x 0.45 GB/s x 40 ms / 4 MiB
    assert capacity == int(14 * 0.45e9 * 0.040 / (4 * MiB)) == 60
    assert decoder.share_of_read(4 * MiB, 27) == 27  # a 256^3 tile of 128^3 chunks
    assert decoder.share_of_read(4 * MiB, 60) == 60
    assert decoder.share_of_read(4 * MiB, 61) == 0
    assert decoder.share_of_read(4 * MiB, 1024) == 0  # a whole level
    assert decoder.share_of_read(4 * MiB, 0) == 0
    # smaller chunks decode sooner on nvCOMP too (one block per chunk): the threshold in
    # chunks barely moves, and a 256^3 tile of 64^3 chunks (125) stays on nvCOMP
    assert decoder.batch_seconds(512 << 10) == (512 << 10) / 120e6
    assert decoder.chunks_per_batch(512 << 10) == 52
    assert decoder.share_of_read(512 << 10, 125) == 0


def test_every_thread_gets_a_chunk_even_for_huge_chunks():
    decoder = HostDecoder(0, 4)
    decoder.gpu_seconds[1 << 30] = 0.001  # however fast nvCOMP was measured to be
    assert decoder.chunks_per_batch(1 << 30) == 4


def test_measured_nvcomp_batches_move_the_threshold():
    decoder = HostDecoder(0, 8)
    before = decoder.chunks_per_batch(4 * MiB)
    for _ in range(30):
        decoder.learn_gpu(4 * MiB, 0.120)  # a slower GPU (or busier): the host takes more
    assert decoder.batch_seconds(4 * MiB) > 0.11
    assert decoder.chunks_per_batch(4 * MiB) > 2 * before
    assert decoder.batch_seconds(64 << 10) == 0.002  # other sizes keep their estimate
