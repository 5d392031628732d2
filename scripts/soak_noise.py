"""How often the soak's latency check fails on measured noise, and on a slowdown of it: made-up 2-minute runs
redrawn from real soak records.

    python scripts/soak_noise.py results/soak-*.json                 # 10 s stretches, 200 made-up runs a factor
    python scripts/soak_noise.py results/soak-*.json --stretch-s 20 --factors 1 2

Each record written by ``scripts/soak.py`` keeps its requests. Their measured searches are cut into stretches of
``--stretch-s`` seconds (kept whole, so a stretch crowded by slow views stays crowded); a made-up run's first and
last latency windows are each filled with stretches drawn at random from all the records, the last one's times
multiplied by a factor. Printed per factor: how many of ``--runs`` made-up runs the check fails (``soak.analyse``'s
``search_p50_last_vs_first``, with ``scripts/soak.py``'s defaults), and how many a bare p50 ratio over 1.5 would
fail. Factor 1 is a steady app: its failures are false alarms.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: python scripts/soak_noise.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts import soak


def stretches(records: list[dict], stretch_s: float) -> list[list[tuple[float, float]]]:
    """The records' measured searches as (seconds into the stretch, seconds taken), one list per stretch."""
    found = []
    for record in records:
        measured = record["figures"]["windows_s"][-1][1]
        cut: dict[int, list] = {k: [] for k in range(int(measured // stretch_s))}
        for t, api, outcome, seconds in record["requests"]:
            if api == "/search" and outcome == "ok" and t >= 0 and int(t // stretch_s) in cut:
                cut[int(t // stretch_s)].append((t % stretch_s, seconds))
        found += cut.values()
    return found


def fail_counts(pool, factor: float, runs: int, stretch_s: float, seconds: float = 120.0, seed: int = 0):
    """(runs the check fails, of them for too few searches, runs a bare p50 ratio over 1.5 fails, runs) for
    made-up runs of ``seconds``."""
    rng = random.Random(seed)
    args = soak.SoakArgs()
    first, last = soak.latency_windows(seconds, args)
    check = too_few = bare = 0
    for _ in range(runs):
        requests = []
        for (start, end), scale in ((first, 1.0), (last, factor)):
            for k in range(int((end - start) // stretch_s)):
                requests += [
                    {"t": start + k * stretch_s + dt, "api": "/search", "outcome": "ok", "seconds": s * scale}
                    for dt, s in rng.choice(pool)
                ]
        samples = [{"t": 0.0, "rss_mb": 1.0, "fds": 1, "threads": 1, "output_bytes": 0, "largest_file": 0}]
        samples += [{**samples[0], "t": t} for t in range(2, int(seconds), 2)]
        result = soak.analyse(samples, requests, seconds, 2**20, args)
        check += not result["checks"]["search_p50_last_vs_first"]
        ratio = result["figures"]["search_p50_s"]
        too_few += ratio["verdict"] == "too few searches to judge"
        bare += ratio["first_window"] is not None and ratio["last_window"] > 1.5 * ratio["first_window"]
    return check, too_few, bare, runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", help="JSON records of scripts/soak.py")
    parser.add_argument("--stretch-s", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=200, help="made-up runs a factor")
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0])
    args = parser.parse_args(argv)
    pool = stretches([json.loads(Path(p).read_text()) for p in args.records], args.stretch_s)
    print(f"{len(pool)} stretches of {args.stretch_s:g} s from {len(args.records)} records")
    for factor in args.factors:
        check, too_few, bare, runs = fail_counts(pool, factor, args.runs, args.stretch_s)
        print(
            f"x{factor:g}: the check fails {check} of {runs} ({too_few} for too few searches); "
            f"a bare p50 ratio over 1.5 fails {bare} of {runs}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
