"""The soak (issue #34, item 5): scripts/soak.py runs the load test's mix against ``python app.py`` and checks RSS,
file descriptors, threads, the output folder's cap and search latency stay put.

The 2-minute run is marked ``soak`` (``python -m pytest -m soak``: about 5 minutes with the app's start and a
minute of warm-up, so the default run leaves it out; CI runs it on its own after the default run); the issue's 30
minutes is ``slow``. The checks themselves are tested in the default run on made-up samples: a steady run and a
leaking one, and for the latency check runs with the noise measured in real 2-minute soaks, steady and slowed down.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from scripts import soak


def made_up(seconds=120.0, rss=lambda t: 1000.0, fds=lambda t: 40, threads=lambda t: 30, disk=lambda t: 2**20,
            search_s=lambda t: 0.5) -> tuple[list[dict], list[dict]]:  # fmt: skip
    samples = [
        {
            "t": t,
            "rss_mb": rss(t),
            "fds": fds(t),
            "threads": threads(t),
            "output_bytes": disk(t),
            "largest_file": 2**19,
        }
        for t in range(0, int(seconds), 2)
    ]
    requests = [
        {"t": t + 0.5, "api": "/search", "outcome": "ok", "seconds": search_s(t)} for t in range(int(seconds))
    ]
    return samples, requests


def test_a_steady_run_passes_every_check():
    samples, requests = made_up(rss=lambda t: 900.0 if t < 20 else 1000.0 + t / 10)  # settling, then +1.2 %
    # the unmeasured warm-up before t = 0 (first calls, caches filling) is in no window
    samples.insert(0, {**samples[0], "t": -30.0, "rss_mb": 600.0, "fds": 5, "threads": 3})
    requests.insert(0, {"t": -20.0, "api": "/search", "outcome": "ok", "seconds": 30.0})
    checks = soak.analyse(samples, requests, 120.0, 4 * 2**20, soak.SoakArgs())["checks"]
    assert all(checks.values()), checks


@pytest.mark.parametrize(
    ("leak", "check"),
    [
        ({"rss": lambda t: 1000.0 + t}, "rss_growth_after_warm_up"),  # +8 % between windows 2 and 6
        ({"fds": lambda t: 40 + t // 5}, "fds_flat"),
        ({"threads": lambda t: 30 + t // 5}, "threads_flat"),
        ({"disk": lambda t: 5 * 2**20 if t == 60 else 2**20}, "output_folder_under_cap"),
        ({"search_s": lambda t: 0.5 + t / 60}, "search_p50_last_vs_first"),
    ],
    ids=["rss", "fds", "threads", "disk", "latency"],
)
def test_a_leaking_run_fails_the_check_that_watches_it(leak, check):
    samples, requests = made_up(**leak)
    checks = soak.analyse(samples, requests, 120.0, 4 * 2**20, soak.SoakArgs())["checks"]
    assert [name for name, ok in checks.items() if not ok] == [check]


def noisy_searches(
    seed: int, seconds: float = 120.0, slower=lambda t: 1.0, per_s=0.75, median_s=0.45, log_sd=0.46, lag1=0.43
) -> list[tuple[float, float]]:
    """(sent at, seconds) of searches as the mix gets them on a 2-core machine shared with a training job: sent at
    random, about 0.75 a second; log-normal times, median 0.45 s, log sd 0.46, each search's like the one before
    (lag-1 autocorrelation 0.43 of the log: a slow view beside it slows both). These are the figures of a measured
    2-minute run. ``slower(t)`` scales the time of a search sent at ``t``."""
    rng = random.Random(seed)
    t, z, found = rng.expovariate(per_s), rng.gauss(0, 1), []
    while t < seconds:
        found.append((t, median_s * slower(t) * math.exp(log_sd * z)))
        z = lag1 * z + math.sqrt(1 - lag1**2) * rng.gauss(0, 1)
        t += rng.expovariate(per_s)
    return found


def latency_check(searches, seconds: float = 120.0) -> bool:
    samples, _ = made_up(seconds)
    requests = [{"t": t, "api": "/search", "outcome": "ok", "seconds": s} for t, s in searches]
    return soak.analyse(samples, requests, seconds, 4 * 2**20, soak.SoakArgs())["checks"][
        "search_p50_last_vs_first"
    ]


def old_latency_check(searches, seconds: float = 120.0) -> bool:
    """The check CI ran once and failed on: the last sixth's p50 at most 1.5x the first sixth's, nothing more."""
    first = [s for t, s in searches if t < seconds / 6]
    last = [s for t, s in searches if t >= seconds * 5 / 6]
    return soak.p50(last) <= 1.5 * soak.p50(first)


def test_a_noisy_but_steady_run_passes_the_latency_check():
    runs = [noisy_searches(seed) for seed in range(100)]
    # noise at the scale of the failure in CI (1.53x between 20 s windows of a steady app)...
    assert sum(not old_latency_check(run) for run in runs) >= 5  # 8 of these 100
    # ...is not evidence of a slowdown
    assert all(latency_check(run) for run in runs)


def test_a_2x_slowdown_fails_the_latency_check():
    # the 30 minutes: searches twice as slow from minute 15 on; 5-minute windows of about 225 searches
    thirty = [noisy_searches(seed, 1800.0, slower=lambda t: 2.0 if t >= 900 else 1.0) for seed in range(20)]
    assert sum(not latency_check(run, 1800.0) for run in thirty) >= 19  # all 20 of these
    # 2 minutes: halves of about 45 searches each tell a 3x step, and a 2x one about half the time
    for factor, failing in ((3.0, 95), (2.0, 50)):  # 98 and 56 of these 100
        two = [noisy_searches(seed, slower=lambda t, f=factor: f if t >= 60 else 1.0) for seed in range(100)]
        assert sum(not latency_check(run) for run in two) >= failing


def run_soak(tmp_path, minutes: float) -> dict:
    out = tmp_path / "soak.json"
    assert soak.main(["--minutes", str(minutes), "--output", str(out)]) in (0, 1)
    record = json.loads(out.read_text())
    print(
        json.dumps(
            {k: record["figures"][k] for k in ("search_p50_s", "load_average_1min", "rss_mb", "requests")}
        )
    )
    assert record["passed"], {k: v for k, v in record.items() if k not in ("samples", "requests")}
    return record


@pytest.mark.soak
def test_a_two_minute_soak_of_the_app_holds_steady(tmp_path):
    run_soak(tmp_path, 2)


@pytest.mark.slow
@pytest.mark.timeout(45 * 60)  # 30 minutes of soak, its warm-up and the app's start: past pyproject's 900 s
def test_a_thirty_minute_soak_of_the_app_holds_steady(tmp_path):
    run_soak(tmp_path, 30)
