"""BLAS threads: the paper-case fixed point with the library's thread limit, without it, and with
the environment's single-thread setting, quiet and beside a process keeping one core busy.

Each configuration runs ``attnphase solve --alpha 2 --branch semantic --omega 0.3`` (fast) in a fresh
process, the configurations interleaved ``--repeats`` times; the table prints the median wall time of
the solve (its own ``wall time`` line) and the ratio to the single-thread environment.

    python benchmarks/bench_threads.py [--repeats 3] [--command "solve --alpha 2 ..."]

``limited`` is the default environment (``numerics.threads``: one BLAS thread for the per-node work);
``unlimited`` sets ``ATTNPHASE_BLAS_THREADS=0`` (the libraries' own thread count, the behaviour
without the limit); ``env 1 thread`` sets ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1`` as well.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "limited": {},
    "unlimited": {"ATTNPHASE_BLAS_THREADS": "0"},
    "env 1 thread": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
}


def _busy(stop):
    while not stop.is_set():
        sum(i * i for i in range(10000))


def _run(command: str, extra: dict) -> float:
    env = {**os.environ, **extra}
    out = subprocess.run([sys.executable, "-m", "attnphase.cli", *shlex.split(command)], env=env,
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"wall time ([0-9.]+) s", out)
    return float(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--command", default="solve --alpha 2 --branch semantic --omega 0.3")
    args = ap.parse_args()
    _run(args.command, {})  # the generated code's cache
    for load in ("quiet", "one core busy"):
        stop = multiprocessing.Event()
        busy = None
        if load != "quiet":
            busy = multiprocessing.Process(target=_busy, args=(stop,), daemon=True)
            busy.start()
            time.sleep(0.5)
        times = {name: [] for name in CONFIGS}
        try:
            for _ in range(args.repeats):
                for name, extra in CONFIGS.items():
                    times[name].append(_run(args.command, extra))
        finally:
            stop.set()
            if busy is not None:
                busy.join()
        ref = statistics.median(times["env 1 thread"])
        print(f"{load}: {args.command}")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"  {name:14s} median {med:6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})  "
                  f"ratio to env 1 thread {med / ref:5.2f}")


if __name__ == "__main__":
    main()
