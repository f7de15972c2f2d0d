"""The gate round programs are compiled through on the driver (checks and opens alike): a
bounded number at once, a deadline each, refusals remembered. A compile that never returns
must neither hold the driver's compiles forever nor be started again by a retry."""

from __future__ import annotations

import threading

import pytest

from sparkglass.runtime.contract.errors import InvalidParameterError
from sparkglass.runtime.sampling.compile_gate import CompileBusyError, CompileGate


def test_a_compile_past_its_deadline_is_refused_and_remembered() -> None:
    gate = CompileGate(deadline_s=0.2, max_late=2)
    started: list[str] = []
    release = threading.Event()

    def stuck() -> str:
        started.append("stuck")
        release.wait(30)
        return "late"

    with pytest.raises(InvalidParameterError, match=r"longer than 0\.2 s") as late:
        gate.run("k", stuck, wait=True)
    assert late.value.field == "filter"
    # Asked again (an operator's retry, the webhook, another open): refused from memory,
    # without a second thread.
    for wait in (True, False):
        with pytest.raises(InvalidParameterError, match="longer than"):
            gate.run("k", stuck, wait=wait)
    assert started == ["stuck"]
    # The late compile gave its slot back: other requests still compile.
    assert gate.run("other", lambda: "ok", wait=False) == "ok"
    release.set()


def test_late_compiles_are_bounded_then_the_gate_says_busy_until_they_end() -> None:
    gate = CompileGate(deadline_s=0.1, max_late=2)
    release = threading.Event()
    ended = threading.Semaphore(0)

    def stuck() -> None:
        release.wait(30)
        ended.release()

    for key in ("a", "b"):
        with pytest.raises(InvalidParameterError):
            gate.run(key, stuck, wait=True)
    with pytest.raises(CompileBusyError):
        gate.run("c", lambda: "ok", wait=True)
    release.set()
    for _ in range(2):
        assert ended.acquire(timeout=10)
    # Counted off once they end (the thread's own bookkeeping follows its last line).
    for _ in range(100):
        try:
            assert gate.run("c", lambda: "ok", wait=False) == "ok"
            break
        except CompileBusyError:
            threading.Event().wait(0.05)
    else:
        pytest.fail("the gate stayed busy after the late compiles ended")


def test_a_check_is_turned_away_while_an_open_waits_for_the_slot() -> None:
    gate = CompileGate(deadline_s=10)
    entered, release = threading.Event(), threading.Event()
    results: list[str] = []

    def slow() -> str:
        entered.set()
        release.wait(10)
        return "slow"

    first = threading.Thread(target=lambda: results.append(gate.run("s", slow, wait=True)))
    first.start()
    assert entered.wait(10)
    with pytest.raises(CompileBusyError):
        gate.run("check", lambda: "x", wait=False)
    waiting = threading.Thread(target=lambda: results.append(gate.run("o", lambda: "o", wait=True)))
    waiting.start()
    release.set()
    first.join(10)
    waiting.join(10)
    assert sorted(results) == ["o", "slow"]


def test_a_refusal_is_remembered_and_other_errors_are_not() -> None:
    gate = CompileGate()
    calls: list[str] = []

    def refuse() -> None:
        calls.append("refuse")
        raise InvalidParameterError("filter: no column x", field="filter")

    def crash() -> None:
        calls.append("crash")
        raise RuntimeError("the JVM went away")

    for _ in range(2):
        with pytest.raises(InvalidParameterError):
            gate.run("bad", refuse, wait=True)
        with pytest.raises(RuntimeError):
            gate.run("crash", crash, wait=True)
    assert calls == ["refuse", "crash", "crash"]
