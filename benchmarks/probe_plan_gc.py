"""Planning a full level against Python's garbage collector (CPU only, no GPU needed).

    python benchmarks/probe_plan_gc.py [--live 100000,2000000] [--rounds 15]

Plans a full level of 64^3 chunks of the DESIGN.md volume (8192 chunks) ``--rounds`` times,
keeping the last two plans alive as a pipeline would, with the collector on and paused,
next to ``--live`` other live objects (the rest of a session: a notebook holding Python data
has millions). Two plans: ``arrays`` (``chunk_plan``, rows of arrays, as a read plans now)
and ``tasks`` (the same plan spelled out as one ``ChunkTask`` per chunk, as reads planned
before: three objects per chunk the collector tracks). Prints the median and the worst plan
and the oldest generation collected during each plan: a full (generation 2) collection
walks every live object, so its cost grows with the session, not with the read.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import time

from linumpy_gpu.engine.plan import chunk_plan, plan_chunks
from linumpy_gpu.engine.selection import normalize_selection

SHAPE = (2048, 1024, 1024)
CHUNKS = (64, 64, 64)


def plan_times(rounds: int, paused: bool, kind: str) -> tuple[list[float], list[int]]:
    events: list[int] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            events.append(info["generation"])

    gc.callbacks.append(on_gc)
    selection = normalize_selection(..., SHAPE)
    kept: list = []
    times, oldest = [], []
    try:
        for _ in range(rounds):
            events.clear()
            if paused:
                gc.disable()
            t0 = time.perf_counter()
            if kind == "arrays":
                tasks = chunk_plan(selection, SHAPE, CHUNKS)
            else:
                tasks = list(plan_chunks(selection, SHAPE, CHUNKS))
            times.append(time.perf_counter() - t0)
            oldest.append(max(events, default=-1))
            gc.enable()
            kept = [*kept[-1:], tasks]
    finally:
        gc.callbacks.remove(on_gc)
    return times, oldest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", default="100000,2000000", help="other live objects, per trial")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(
        "| plan | other live objects | collector | median ms | worst ms "
        "| oldest generation per plan |"
    )
    print("|---|---|---|---|---|---|")
    for live in (int(x) for x in args.live.split(",")):
        session = [{"i": i, "v": [i]} for i in range(live)]
        for kind, paused in itertools.product(("arrays", "tasks"), (False, True)):
            times, oldest = plan_times(args.rounds, paused, kind)
            print(
                f"| {kind} | {live} | {'paused' if paused else 'on'} | "
                f"{1e3 * statistics.median(times):.1f} | {1e3 * max(times):.1f} | "
                f"{' '.join('-' if g < 0 else str(g) for g in oldest)} |",
                flush=True,
            )
        del session


if __name__ == "__main__":
    main()
