"""Fixtures of the sampling tests.

``FakeTransport`` is a scripted RoundTransport (the coordinator's logic without Spark);
``sampling_on`` switches sampling on in the shared session and restores the conf after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkglass.runtime.contract.sampling_settings import SamplingSettings


@dataclass
class FakeRound:
    tap_key: str
    window_ms: int
    settings: SamplingSettings
    participants: list[str]
    reported: set[str] = field(default_factory=set)
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    progress: dict[str, list[int]] = field(default_factory=dict)
    cancelled: bool = False


class FakeTransport:
    """Executors ``alive``; tests call :meth:`report` to deliver an executor's buffers."""

    def __init__(self, executors: tuple[str, ...] = ("1", "2")) -> None:
        self.alive = set(executors)
        self.rounds: dict[str, FakeRound] = {}
        self.forgotten: list[str] = []
        self.auto_report: dict[str, list[dict[str, Any]]] | None = None

    def available(self) -> bool:
        return True

    def start_round(
        self, round_id: str, tap_key: str, settings: SamplingSettings, window_ms: int
    ) -> None:
        self.rounds[round_id] = FakeRound(tap_key, window_ms, settings, sorted(self.alive))
        if self.auto_report is not None:
            for executor, parts in self.auto_report.items():
                self.report(round_id, executor, parts)

    def report(self, round_id: str, executor: str, partitions: list[dict[str, Any]]) -> None:
        rnd = self.rounds[round_id]
        rnd.reported.add(executor)
        rnd.reports[executor] = partitions

    def round_status(self, round_id: str) -> dict[str, Any]:
        rnd = self.rounds.get(round_id)
        if rnd is None:
            return {"known": False}
        return {
            "known": True,
            "participants": rnd.participants,
            "reported": sorted(rnd.reported),
            "alive": sorted(self.alive),
            "progress": rnd.progress,
        }

    def round_reports(self, round_id: str) -> dict[str, list[dict[str, Any]]]:
        return dict(self.rounds[round_id].reports)

    def cancel_round(self, round_id: str) -> None:
        if round_id in self.rounds:
            self.rounds[round_id].cancelled = True

    def forget_round(self, round_id: str) -> None:
        self.forgotten.append(round_id)


def partition(index: int, n: int, *, ts: int = 1000, rate: int = 0, contention: int = 0) -> dict:
    """A report entry for one partition with ``n`` records ``{"i": k}``."""
    return {
        "subtaskIndex": index,
        "records": [
            {"sampleTimestamp": ts + k, "data": f'{{"p":{index},"i":{k}}}', "truncated": False}
            for k in range(n)
        ],
        "droppedByRateLimit": rate,
        "droppedByContention": contention,
    }


@pytest.fixture
def transport() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def make_partition() -> Callable[..., dict]:
    return partition


@pytest.fixture
def sampling_conf(spark: Any) -> Iterator[Callable[..., None]]:
    """Call with ``name=value`` (``max_sample_rate=5``) to set ``spark.sparkglass.sampling.*``
    (``control_enabled=True`` sets ``spark.sparkglass.control.enabled``); restored after."""
    saved: dict[str, str | None] = {}

    def key_of(name: str) -> str:
        if name.startswith("control_"):
            return "spark.sparkglass.control." + name[len("control_") :].replace("_", "-")
        return "spark.sparkglass.sampling." + name.replace("_", "-")

    def set_conf(**values: Any) -> None:
        for name, value in values.items():
            key = key_of(name)
            saved.setdefault(key, spark.conf.get(key, None))
            spark.conf.set(key, str(value).lower() if isinstance(value, bool) else str(value))

    yield set_conf
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
