"""Attack: a burst of polls that miss the route layer's one-second auth caches together.

Each request in flight when an entry expired sent its own authentication and authorization
call to the thread pool; in Kubernetes auth mode, its own TokenReview and SubjectAccessReview
to the API server. A client could multiply the reviews it causes by the number of requests it
keeps in flight, with a valid token or a refused one. Concurrent misses now share one call
(``service/auth/single_flight.py``). Checked against the real service over HTTP on 127.0.0.1;
the coalescing rules (per key, per event loop, cancellation) on their own.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from sparkglass.service.app import create_app
from sparkglass.service.auth import Permission, Principal
from sparkglass.service.auth.single_flight import SingleFlight
from sparkglass.service.settings import Settings
from tests.service.fake_driver import ServerThread

TOKENS = {"viewer": "viewer-token-0123456789"}

POLLERS = 30
URL = "/api/v1/namespaces/local/applications/nowhere/vertices/parse/data-sample"


class HeldAuthenticator:
    """The service's own authenticator, counting its calls; each call waits until the test
    lets it go, so every poller misses the cache while the first call is still running."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.authenticated = 0
        self.authorized = 0

    def authenticate(self, token: str) -> Principal | None:
        self.authenticated += 1
        assert self.release.wait(30), "the test never released the authenticator"
        return self.inner.authenticate(token)  # type: ignore[no-any-return]

    def authorize(self, principal: Principal, namespace: str, permission: Permission) -> bool:
        self.authorized += 1
        return self.inner.authorize(principal, namespace, permission)  # type: ignore[no-any-return]


class CountingFlight(SingleFlight[Any]):
    """Counts the requests that reached the coalescing point (on the server's loop); stands
    in for both of the service's (authentication, then authorization)."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = 0

    async def run(self, key: Hashable, call: Callable[[], Any]) -> Any:
        self.entered += 1
        return await super().run(key, call)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, HeldAuthenticator, CountingFlight]]:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("".join(f"{t},{r}-user,{r}\n" for r, t in TOKENS.items()))
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'store.db'}",
            tokens_file=tokens,
            store_key=SecretStr(Fernet.generate_key().decode()),
            # The limiter would answer 429 to a burst of bad tokens before the route runs.
            auth_failure_limit=10 * POLLERS,
        )
    )
    state = app.state.sparkglass
    held = HeldAuthenticator(state.authenticator)
    flight = CountingFlight()
    state.authenticator = held
    state.principal_calls = state.decision_calls = flight
    with ServerThread(app) as server:
        yield server.url, held, flight


async def _poll_together(
    url: str, token: str, flight: CountingFlight, held: HeldAuthenticator
) -> list[int]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        polls = [
            asyncio.create_task(client.get(URL, headers={"Authorization": f"Bearer {token}"}))
            for _ in range(POLLERS)
        ]
        deadline = time.monotonic() + 30
        while flight.entered < POLLERS:  # every poller is waiting on the cache miss
            assert time.monotonic() < deadline, f"{flight.entered} of {POLLERS} pollers arrived"
            await asyncio.sleep(0.01)
        held.release.set()
        return [r.status_code for r in await asyncio.gather(*polls)]


async def test_pollers_missing_together_share_one_authentication_and_one_review(
    service: tuple[str, HeldAuthenticator, CountingFlight],
) -> None:
    url, held, flight = service
    codes = await _poll_together(url, TOKENS["viewer"], flight, held)
    # Authorized, then the application is unknown: 404 for every poller.
    assert codes == [404] * POLLERS
    assert held.authenticated == 1 and held.authorized == 1
    assert flight.in_flight() == 0


async def test_a_refused_token_is_refused_to_every_poller_after_one_call(
    service: tuple[str, HeldAuthenticator, CountingFlight],
) -> None:
    url, held, flight = service
    codes = await _poll_together(url, "not-a-token-0123456789", flight, held)
    assert codes == [401] * POLLERS
    assert held.authenticated == 1 and held.authorized == 0


async def test_one_call_per_key_at_a_time_and_again_once_done() -> None:
    flight: SingleFlight[str] = SingleFlight()
    gate = threading.Event()
    calls: list[str] = []

    def call(name: str) -> Callable[[], str]:
        def run() -> str:
            calls.append(name)
            assert gate.wait(10)
            return name

        return run

    a1 = asyncio.create_task(flight.run("a", call("a1")))
    a2 = asyncio.create_task(flight.run("a", call("a2")))
    b = asyncio.create_task(flight.run("b", call("b")))
    deadline = time.monotonic() + 10
    while len(calls) < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(a1, a2, b) == ["a1", "a1", "b"]
    assert sorted(calls) == ["a1", "b"] and flight.in_flight() == 0
    assert await flight.run("a", call("a3")) == "a3"  # done calls are not remembered


async def test_a_cancelled_caller_leaves_the_call_to_the_others_and_errors_reach_all() -> None:
    flight: SingleFlight[str] = SingleFlight()
    gate = threading.Event()

    def fails() -> str:
        assert gate.wait(10)
        raise PermissionError("refused")

    first = asyncio.create_task(flight.run("k", fails))
    second = asyncio.create_task(flight.run("k", fails))
    third = asyncio.create_task(flight.run("k", fails))
    await asyncio.sleep(0.05)
    first.cancel()  # its client went away
    gate.set()
    results = await asyncio.gather(first, second, third, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [type(r) for r in results[1:]] == [PermissionError, PermissionError]
    assert flight.in_flight() == 0


async def test_when_every_caller_leaves_a_queued_call_is_dropped_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flight: SingleFlight[str] = SingleFlight()
    gate = threading.Event()
    ran: list[str] = []

    def slow() -> str:  # occupies the only thread
        assert gate.wait(10)
        return "slow"

    def queued() -> str:
        ran.append("queued")
        raise PermissionError("refused")

    limiter = anyio_limiter()
    limiter.total_tokens, before = 1, limiter.total_tokens
    try:
        running = asyncio.create_task(flight.run("running", slow))
        waiting = [asyncio.create_task(flight.run("queued", queued)) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert flight.in_flight() == 2
        for task in waiting:  # a shutdown or a timeout cancels every caller of "queued"
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        assert flight.in_flight() == 1  # dropped at once: a new caller starts afresh
        gate.set()
        assert await running == "slow"
        deadline = time.monotonic() + 10
        while flight.in_flight():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
    finally:
        limiter.total_tokens = before
    assert ran == []  # never given a thread
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        # The only caller of a failing call that has its thread leaves: the thread finishes,
        # and its 401 is not logged as an unretrieved exception.
        lone, started = threading.Event(), threading.Event()

        def fails() -> str:
            started.set()
            assert lone.wait(10)
            raise PermissionError("refused")

        caller = asyncio.create_task(flight.run("k", fails))
        assert await asyncio.to_thread(started.wait, 10)  # the call has its thread
        caller.cancel()
        lone.set()
        await asyncio.gather(caller, return_exceptions=True)
        deadline = time.monotonic() + 10
        while flight.in_flight():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


def test_two_event_loops_never_share_a_call() -> None:
    flight: SingleFlight[str] = SingleFlight()
    gate = threading.Event()
    calls: list[str] = []

    def call() -> str:
        calls.append(threading.current_thread().name)
        assert gate.wait(10)
        return "ok"

    results: list[str] = []
    errors: list[BaseException] = []

    def on_its_own_loop() -> None:
        try:
            results.append(asyncio.run(flight.run("same-key", call)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=on_its_own_loop) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(calls) < 2:  # one call per loop, both running
        assert time.monotonic() < deadline, f"{len(calls)} calls started"
        time.sleep(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert errors == [] and results == ["ok", "ok"] and flight.in_flight() == 0


def anyio_limiter() -> Any:
    """The thread pool's capacity (``run_in_threadpool`` uses anyio's default limiter)."""
    return anyio.to_thread.current_default_thread_limiter()
