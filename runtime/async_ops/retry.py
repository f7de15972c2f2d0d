"""Retry strategies for async requests, in the shape of Flink's FLIP-232.

A strategy answers three questions after an attempt: *may we try again* (``can_retry``,
from the number of attempts made), *how long to wait first* (``backoff_s``), and *is this
outcome worth retrying* (the predicates on the result and on the exception). The strategies
are :data:`NO_RETRY`, :class:`FixedDelayRetry` and :class:`ExponentialBackoffRetry`;
:func:`call_with_retry` applies one. Times are seconds. docs/async-operators.md, "Retry
strategies", has the table.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sparkglass.runtime.async_ops.errors import AsyncConfigError

T = TypeVar("T")
ResultPredicate = Callable[[Any], bool]
ExceptionPredicate = Callable[[BaseException], bool]

#: Upper bounds that catch unit mistakes (milliseconds passed as seconds) early.
MAX_ATTEMPTS = 1000
MAX_DELAY_S = 3600.0


def validation_message(model: str, error: ValidationError) -> str:
    """One line per bad field: ``Model.field: rule (got value)``."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(model)"
        got = item.get("input")
        suffix = "" if isinstance(got, dict) else f" (got {got!r})"
        parts.append(f"{model}.{where}: {item['msg']}{suffix}")
    return "; ".join(parts)


class RetryStrategy(BaseModel):
    """Base of the strategies: the predicates and the questions the caller asks.

    Predicates: ``retry_on_result(result) -> bool`` (default: never retry a result) and
    ``retry_on_exception(exc) -> bool`` (default: retry every ``Exception``). When attempts
    run out, the last outcome stands: a result the predicate disliked is still emitted (as in
    Flink), an exception fails the request (:class:`AsyncRequestError`).

    ``max_attempts`` counts *all* attempts, the first included (Flink's builder counts
    retries; ``max_attempts=3`` here is Flink's ``maxAttempts=2``). Parameters are validated
    on construction; a bad one raises :class:`AsyncConfigError` naming the field, the rule
    and the value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    max_attempts: int = Field(default=1, ge=1, le=MAX_ATTEMPTS)
    retry_on_result: ResultPredicate | None = None
    retry_on_exception: ExceptionPredicate | None = None

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise AsyncConfigError(validation_message(type(self).__name__, exc)) from None

    def can_retry(self, attempts_made: int) -> bool:
        """True if another attempt is allowed after ``attempts_made`` (≥ 1) attempts."""
        return attempts_made < self.max_attempts

    def backoff_s(self, attempts_made: int) -> float:
        """Seconds to wait before the next attempt, after ``attempts_made`` attempts."""
        return 0.0

    def retries_result(self, result: Any) -> bool:
        """True if ``result`` should be retried (the result predicate; default no)."""
        return self.retry_on_result is not None and bool(self.retry_on_result(result))

    def retries_exception(self, exc: BaseException) -> bool:
        """True if ``exc`` should be retried (the exception predicate; default any Exception)."""
        if self.retry_on_exception is None:
            return isinstance(exc, Exception)
        return bool(self.retry_on_exception(exc))


class NoRetry(RetryStrategy):
    """Exactly one attempt; ``max_attempts`` is fixed at 1."""

    max_attempts: int = Field(default=1, ge=1, le=1)


class FixedDelayRetry(RetryStrategy):
    """Up to ``max_attempts`` attempts (≥ 1), ``delay_s`` seconds (0–3600) apart."""

    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS)
    delay_s: float = Field(default=0.1, ge=0.0, le=MAX_DELAY_S)

    def backoff_s(self, attempts_made: int) -> float:
        return self.delay_s


class ExponentialBackoffRetry(RetryStrategy):
    """Up to ``max_attempts`` attempts with exponentially growing waits.

    The wait before retry *n* (n = 1, 2, …) is
    ``min(initial_delay_s * multiplier ** (n - 1), max_delay_s)`` seconds.
    ``initial_delay_s`` in (0, 3600], ``max_delay_s`` in [initial_delay_s, 3600],
    ``multiplier`` ≥ 1.
    """

    max_attempts: int = Field(default=5, ge=1, le=MAX_ATTEMPTS)
    initial_delay_s: float = Field(default=0.1, gt=0.0, le=MAX_DELAY_S)
    max_delay_s: float = Field(default=10.0, gt=0.0, le=MAX_DELAY_S)
    multiplier: float = Field(default=2.0, ge=1.0, le=100.0)

    _ORDER_RULE: ClassVar[str] = "max_delay_s must be ≥ initial_delay_s"

    @model_validator(mode="after")
    def _delays_ordered(self) -> ExponentialBackoffRetry:
        if self.max_delay_s < self.initial_delay_s:
            raise ValueError(
                f"{self._ORDER_RULE} (got max_delay_s={self.max_delay_s}, "
                f"initial_delay_s={self.initial_delay_s})"
            )
        return self

    def backoff_s(self, attempts_made: int) -> float:
        delay = self.initial_delay_s * self.multiplier ** max(0, attempts_made - 1)
        return min(delay, self.max_delay_s)


#: The default strategy: one attempt, no retry.
NO_RETRY = NoRetry()


class Attempts:
    """How many attempts one request took (filled in by :func:`call_with_retry`)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


async def call_with_retry(
    call: Callable[[], Awaitable[T]],
    strategy: RetryStrategy,
    attempts: Attempts | None = None,
) -> T:
    """Await ``call()`` until it succeeds or ``strategy`` gives up.

    Returns the last result (even one ``retry_on_result`` disliked, once attempts ran
    out); raises the last exception when it is not retryable or attempts ran out.
    ``asyncio.CancelledError`` is never retried. ``attempts.count`` ends as the number of
    attempts made.
    """
    counter = attempts or Attempts()
    while True:
        counter.count += 1
        try:
            result = await call()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not (strategy.can_retry(counter.count) and strategy.retries_exception(exc)):
                raise
        else:
            if not (strategy.can_retry(counter.count) and strategy.retries_result(result)):
                return result
        await asyncio.sleep(strategy.backoff_s(counter.count))
