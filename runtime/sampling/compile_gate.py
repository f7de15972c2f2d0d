"""Compiling round programs on the driver: a bounded number at once, each with a deadline.

A round's filter and columns are compiled by Spark's parser and analyzer on the driver of a
running job, for a round check (an admission webhook asks before a DataSample is stored) as for
a round's open. Compiles of a request nobody has seen before are the only work a caller can
make the driver do before any round runs, so they go through one gate (:class:`CompileGate`).
The allowlist (``io.sparkglass.sampling.FilterAllowlist``) makes a long compile unlikely; the
gate is what holds if one still happens.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final, TypeVar

from sparkglass.runtime.contract.errors import InvalidParameterError, SparkglassError

T = TypeVar("T")

#: Compiles at once on one driver (a 4,096-character filter takes Spark's analyzer up to
#: ~2 s on a cold driver).
CONCURRENT_COMPILES: Final = 1
#: Longest a compile may take, seconds: ten times the slowest legitimate one measured.
COMPILE_DEADLINE_S: Final = 20.0
#: Compiles past their deadline that may still run before the gate refuses all as busy.
MAX_LATE_COMPILES: Final = 2
#: Refusals remembered (each a request of at most ~64 KiB and its message): a few MiB at most.
KEPT_REFUSALS: Final = 64


class CompileBusyError(SparkglassError):
    """Another compile holds the gate (or too many ran past their deadline); ask again later."""


class CompileGate:
    """The gate of one driver; thread-safe.

    * at most :data:`CONCURRENT_COMPILES` at once; a check finds the gate busy at once
      (:class:`CompileBusyError`, an HTTP 503), an open waits for it up to the deadline;
    * each compile runs on its own thread and has :data:`COMPILE_DEADLINE_S`; one past it is
      refused (``field`` ``filter``) and its request remembered, so asking again is refused at
      once instead of starting another thread. The late thread cannot be stopped (the JVM
      runs it): it gives its slot back at the deadline, so other requests still compile, and
      at most :data:`MAX_LATE_COMPILES` may run late before the gate refuses every compile as
      busy;
    * a refusal (late or not) is remembered per request, the last :data:`KEPT_REFUSALS`.
    """

    def __init__(
        self,
        *,
        concurrency: int = CONCURRENT_COMPILES,
        deadline_s: float = COMPILE_DEADLINE_S,
        max_late: int = MAX_LATE_COMPILES,
    ) -> None:
        self._slots = threading.BoundedSemaphore(concurrency)
        self._deadline_s = deadline_s
        self._max_late = max_late
        self._lock = threading.Lock()
        self._late = 0
        self._refused: OrderedDict[Hashable, InvalidParameterError] = OrderedDict()

    @property
    def deadline_s(self) -> float:
        return self._deadline_s

    def refusal(self, key: Hashable) -> InvalidParameterError | None:
        """The refusal remembered for ``key``, if any."""
        with self._lock:
            return self._refused.get(key)

    def run(self, key: Hashable, compile: Callable[[], T], *, wait: bool) -> T:
        """``compile()`` under the gate, for the request ``key``.

        ``wait``: wait for a slot up to the deadline (an open) instead of failing at once (a
        check). Raises the remembered refusal of ``key``; :class:`CompileBusyError`;
        :class:`InvalidParameterError` (``field`` ``filter``) past the deadline; whatever
        ``compile`` raises (an :class:`InvalidParameterError` is remembered)."""
        known = self.refusal(key)
        if known is not None:
            raise known
        with self._lock:
            if self._late >= self._max_late:
                raise CompileBusyError(
                    "round programs are not compiled on this driver until the compiles that "
                    "ran past their deadline end"
                )
        if not self._slots.acquire(timeout=self._deadline_s if wait else 0):
            raise CompileBusyError("another round program is being compiled on this driver")
        outcome: list[T] = []
        failure: list[BaseException] = []
        done = threading.Event()

        def work() -> None:
            try:
                outcome.append(compile())
            except BaseException as exc:  # handed to the caller
                failure.append(exc)
            finally:
                with self._lock:
                    if done.is_set():  # late: its slot went back at the deadline
                        self._late -= 1
                    else:
                        self._slots.release()
                        done.set()

        thread = threading.Thread(target=work, name="sparkglass-compile", daemon=True)
        thread.start()
        if not done.wait(self._deadline_s):
            with self._lock:
                if not done.is_set():
                    done.set()  # from now on the thread is late (see work())
                    self._late += 1
                    self._slots.release()
                    late = InvalidParameterError(
                        f"filter: compiling this request took longer than "
                        f"{self._deadline_s:g} s on the driver; simplify the filter",
                        field="filter",
                    )
                    self._remember(key, late)
                    raise late
        if failure:
            if isinstance(failure[0], InvalidParameterError):
                with self._lock:
                    self._remember(key, failure[0])
            raise failure[0]
        return outcome[0]

    def _remember(self, key: Hashable, refusal: InvalidParameterError) -> None:
        # Caller holds the lock.
        self._refused[key] = refusal
        self._refused.move_to_end(key)
        while len(self._refused) > KEPT_REFUSALS:
            self._refused.popitem(last=False)
