"""A mailbox executor: run actions in the task thread, between records (FLIP-177).

Other threads (the event loop that completes async requests) hand work to the task
thread with :meth:`MailboxExecutor.execute`; the task thread runs it when it calls
:meth:`MailboxExecutor.yield_` (blocking until there is mail) or
:meth:`MailboxExecutor.try_yield` (never blocking). So the code that handles results
runs in one thread and needs no locks. :meth:`MailboxExecutor.cancel` (from any thread)
wakes a blocked ``yield_`` and makes it, and every later one, raise
:class:`WriterInterruptedError`: a cancelled task never hangs in a wait.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from sparkglass.runtime.async_ops.errors import WriterInterruptedError

Action = Callable[[], None]


class MailboxExecutor:
    """A queue of actions drained by the owning (task) thread.

    The owner is the thread that creates the executor; only it may yield. ``execute`` is
    safe from any thread. Mail that arrives after ``cancel`` is dropped.
    """

    def __init__(self) -> None:
        # ``None`` is a mail that only wakes a blocked yield_ (cancel sends it).
        self._mail: queue.SimpleQueue[tuple[Action, str] | None] = queue.SimpleQueue()
        self._owner = threading.get_ident()
        self._cancelled: str | None = None

    @property
    def owner(self) -> int:
        """``threading.get_ident()`` of the thread that runs the mail."""
        return self._owner

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        return self._cancelled is not None

    def execute(self, action: Action, description: str = "") -> None:
        """Queue ``action`` to run in the owner thread (any thread may call this).

        ``description`` names the action in errors. Batch results and send one action
        per batch where you can: each mail costs a queue round trip.
        """
        if self._cancelled is None:
            self._mail.put((action, description))

    def yield_(self, timeout_s: float | None = None) -> bool:
        """Run one mail in this (owner) thread, waiting up to ``timeout_s`` seconds for it.

        Returns True if a mail ran, False on timeout. Raises
        :class:`WriterInterruptedError` if cancelled (before or while waiting),
        ``RuntimeError`` if called from another thread than the owner, and whatever the
        action raised.
        """
        self._check_owner()
        self._raise_if_cancelled()
        try:
            item = self._mail.get(timeout=timeout_s)
        except queue.Empty:
            return False
        self._raise_if_cancelled()
        if item is None:
            return False
        action, _description = item
        action()
        return True

    def try_yield(self) -> bool:
        """Run one mail if there is one, without waiting; True if one ran."""
        self._check_owner()
        self._raise_if_cancelled()
        try:
            item = self._mail.get_nowait()
        except queue.Empty:
            return False
        if item is None:
            return False
        action, _description = item
        action()
        return True

    def cancel(self, reason: str = "cancelled") -> None:
        """Interrupt the owner: a waiting ``yield_`` raises at once (any thread may call)."""
        if self._cancelled is None:
            self._cancelled = reason
            self._mail.put(None)

    def _raise_if_cancelled(self) -> None:
        if self._cancelled is not None:
            raise WriterInterruptedError(f"mailbox interrupted: {self._cancelled}")

    def _check_owner(self) -> None:
        if threading.get_ident() != self._owner:
            raise RuntimeError("only the task thread that created the mailbox may yield to it")
