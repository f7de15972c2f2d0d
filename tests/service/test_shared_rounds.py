"""The shared-round rule: many clients polling one vertex through two service replicas
(two uvicorn servers sharing one store) start at most one round per refresh interval."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from sparkglass.service.store import claim_round, get_application, list_rounds, open_store
from tests.support.service_replicas import replicas

from .conftest import TOKENS
from .fake_driver import FakeDriver, ServerThread

URL = "/api/v1/namespaces/local/applications/flights/vertices/{v}/data-sample"


def test_concurrent_polls_share_one_round(
    db_url: str, tokens_file: Path, fake_driver: FakeDriver
) -> None:
    vertex = "slow"  # pending for 2 s: every poll below lands while the round runs
    apps = replicas(db_url, tokens_file, fake_driver, refresh=60)
    before = fake_driver.started.get(vertex, 0)
    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        barrier = threading.Barrier(40)

        def poll(i: int) -> dict:
            base = (a if i % 2 else b).url
            with httpx.Client(base_url=base, timeout=30) as c:
                barrier.wait()
                r = c.get(
                    URL.format(v=vertex), headers={"Authorization": f"Bearer {TOKENS['sampler']}"}
                )
                assert r.status_code == 200, r.text
                return r.json()

        with ThreadPoolExecutor(40) as pool:
            answers = list(pool.map(poll, range(40)))
        assert {x["status"] for x in answers} == {"PENDING"}
        assert len({x["roundId"] for x in answers if x["roundId"]}) == 1
        deadline = time.monotonic() + 60
        while fake_driver.started.get(vertex, 0) == before:
            assert time.monotonic() < deadline, "no round reached the driver in 60 s"
            time.sleep(0.05)
        for app in apps:
            assert app.state.sparkglass.coordinator.wait_idle(15)
    assert fake_driver.started.get(vertex, 0) - before == 1
    with apps[0].state.sparkglass.sessions() as s:
        flights = get_application(s, "local", "flights")
        assert flights is not None
        rounds = list_rounds(s, flights.id, vertex)
    assert len(rounds) == 1 and rounds[0].status == "COMPLETE"
    for app in apps:
        app.state.sparkglass.sessions.kw["bind"].dispose()


def test_at_most_one_round_per_refresh_interval(
    db_url: str,
    tokens_file: Path,
    fake_driver: FakeDriver,
    settings_left_to_the_service: FakeDriver,
) -> None:
    refresh = 0.6
    vertex = "parse"
    apps = replicas(db_url, tokens_file, fake_driver, refresh=refresh)
    sessions = apps[0].state.sparkglass.sessions
    with sessions() as s:
        flights = get_application(s, "local", "flights")
        assert flights is not None
        app_id = flights.id

    def starts() -> list[int]:
        with sessions() as s:
            return sorted(r.started_at for r in list_rounds(s, app_id, vertex))

    begin = time.monotonic()
    # Poll until a few intervals went by (bounded: the machine may be slow).
    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        done = threading.Event()

        def hammer(i: int) -> int:
            n = 0
            with httpx.Client(base_url=(a if i % 2 else b).url, timeout=30) as c:
                while not done.is_set():
                    r = c.get(
                        URL.format(v=vertex),
                        headers={"Authorization": f"Bearer {TOKENS['sampler']}"},
                    )
                    assert r.status_code == 200, r.text
                    n += 1
            return n

        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(hammer, i) for i in range(16)]
            deadline = time.monotonic() + 20
            while len(starts()) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            done.set()
            assert sum(f.result() for f in futures) > 20
        elapsed = time.monotonic() - begin
        for app in apps:
            assert app.state.sparkglass.coordinator.wait_idle(15)
    got = starts()
    assert len(got) >= 3, got
    assert len(got) <= elapsed / refresh + 1
    gaps = [y - x for x, y in itertools.pairwise(got)]
    assert min(gaps) >= refresh * 1000
    for app in apps:
        app.state.sparkglass.sessions.kw["bind"].dispose()


def test_claim_is_exclusive_under_threads(db_url: str) -> None:
    """The store primitive alone: 32 threads claim one lease, exactly one wins."""
    sessions = open_store(db_url)
    from sparkglass.service.store import upsert_application

    with sessions.begin() as s:
        app_id = upsert_application(s, "local", "a").id
    barrier = threading.Barrier(32)

    def claim(i: int) -> bool:
        barrier.wait()
        with sessions.begin() as s:
            return claim_round(s, app_id, "v", f"r{i}", interval_ms=60_000)

    with ThreadPoolExecutor(32) as pool:
        wins = list(pool.map(claim, range(32)))
    assert wins.count(True) == 1
    sessions.kw["bind"].dispose()
