"""Retry strategies (FLIP-232 shape): validation, back-off sequences, predicates."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from sparkglass.runtime.async_ops.errors import AsyncConfigError
from sparkglass.runtime.async_ops.retry import (
    NO_RETRY,
    Attempts,
    ExponentialBackoffRetry,
    FixedDelayRetry,
    NoRetry,
    call_with_retry,
)


class Flaky:
    """Fails ``failures`` times with ``error``, then returns the attempt number."""

    def __init__(self, failures: int, error: Exception | None = None) -> None:
        self.failures = failures
        self.error = error or ConnectionError("down")
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.calls


def run(coro):
    return asyncio.run(coro)


def test_exponential_backoff_sequence_is_capped() -> None:
    s = ExponentialBackoffRetry(max_attempts=6, initial_delay_s=0.1, max_delay_s=0.5, multiplier=2)
    assert [s.backoff_s(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert s.can_retry(5) and not s.can_retry(6)


def test_fixed_delay_is_constant() -> None:
    s = FixedDelayRetry(max_attempts=3, delay_s=0.25)
    assert [s.backoff_s(n) for n in (1, 2)] == [0.25, 0.25]
    assert s.can_retry(2) and not s.can_retry(3)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FixedDelayRetry(max_attempts=0), "FixedDelayRetry.max_attempts"),
        (lambda: FixedDelayRetry(delay_s=-1), "FixedDelayRetry.delay_s"),
        (lambda: ExponentialBackoffRetry(multiplier=0.5), "ExponentialBackoffRetry.multiplier"),
        (lambda: ExponentialBackoffRetry(initial_delay_s=0), "initial_delay_s"),
        (lambda: ExponentialBackoffRetry(initial_delay_s=2, max_delay_s=1), "max_delay_s must be"),
        (lambda: NoRetry(max_attempts=2), "NoRetry.max_attempts"),
        (lambda: FixedDelayRetry(delays=1), "FixedDelayRetry.delays"),  # type: ignore[call-arg]
        (
            lambda: FixedDelayRetry(retry_on_result=3),  # type: ignore[arg-type]
            "FixedDelayRetry.retry_on_result",
        ),
    ],
)
def test_bad_parameters_raise_clear_errors(build, field: str) -> None:
    with pytest.raises(AsyncConfigError, match=field.replace(".", r"\.")) as info:
        build()
    assert isinstance(info.value, ValueError)


def test_no_retry_makes_one_attempt() -> None:
    flaky = Flaky(1)
    with pytest.raises(ConnectionError):
        run(call_with_retry(flaky, NO_RETRY))
    assert flaky.calls == 1


def test_fixed_delay_retries_exceptions_until_success() -> None:
    flaky = Flaky(2)
    attempts = Attempts()
    assert run(call_with_retry(flaky, FixedDelayRetry(max_attempts=3, delay_s=0), attempts)) == 3
    assert attempts.count == 3


def test_exhausted_exception_propagates() -> None:
    flaky = Flaky(5)
    with pytest.raises(ConnectionError):
        run(call_with_retry(flaky, FixedDelayRetry(max_attempts=3, delay_s=0)))
    assert flaky.calls == 3


def test_exception_predicate_limits_what_is_retried() -> None:
    strategy = FixedDelayRetry(
        max_attempts=5, delay_s=0, retry_on_exception=lambda e: isinstance(e, ConnectionError)
    )
    flaky = Flaky(1, ValueError("bad input"))
    with pytest.raises(ValueError):
        run(call_with_retry(flaky, strategy))
    assert flaky.calls == 1


def test_result_predicate_retries_then_last_result_stands() -> None:
    calls: list[int] = []

    async def answer() -> int:
        calls.append(1)
        return len(calls)

    retry_small = FixedDelayRetry(max_attempts=4, delay_s=0, retry_on_result=lambda r: r < 3)
    assert run(call_with_retry(answer, retry_small)) == 3
    calls.clear()
    never_happy = FixedDelayRetry(max_attempts=2, delay_s=0, retry_on_result=lambda r: True)
    assert run(call_with_retry(answer, never_happy)) == 2  # as in Flink: the last result


def test_exponential_backoff_waits_between_attempts() -> None:
    loop_times: list[float] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def failing() -> None:
            loop_times.append(loop.time())
            raise ConnectionError("down")

        strategy = ExponentialBackoffRetry(
            max_attempts=4, initial_delay_s=0.02, max_delay_s=0.05, multiplier=2
        )
        with pytest.raises(ConnectionError):
            await call_with_retry(failing, strategy)

    run(main())
    gaps = [b - a for a, b in itertools.pairwise(loop_times)]
    assert len(gaps) == 3
    for gap, expected in zip(gaps, [0.02, 0.04, 0.05], strict=True):
        assert expected - 0.002 <= gap < expected + 0.05


def test_cancellation_is_never_retried() -> None:
    async def main() -> int:
        calls = 0

        async def slow() -> None:
            nonlocal calls
            calls += 1
            await asyncio.sleep(10)

        task = asyncio.ensure_future(call_with_retry(slow, FixedDelayRetry(max_attempts=5)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return calls

    assert run(main()) == 1


def test_strategies_pickle_with_predicates() -> None:
    from pyspark import cloudpickle

    s = ExponentialBackoffRetry(retry_on_result=lambda r: r is None)
    clone = cloudpickle.loads(cloudpickle.dumps(s))
    assert clone.retries_result(None) and not clone.retries_result(1)
    assert clone.backoff_s(1) == s.backoff_s(1)
