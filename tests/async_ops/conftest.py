"""Fixtures of the async-operator tests: one real weather service for the module run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkglass.demo.weather_service import Faults, WeatherService


@pytest.fixture(scope="session")
def weather_service() -> Iterator[WeatherService]:
    """The weather service on 127.0.0.1 (a thread of the test process)."""
    with WeatherService() as service:
        yield service


@pytest.fixture
def weather(weather_service: WeatherService) -> Iterator[WeatherService]:
    """The service with default faults (no latency, no failures) and zeroed counters."""
    weather_service.app.faults = Faults()
    weather_service.reset()
    yield weather_service
    weather_service.app.faults = Faults()
