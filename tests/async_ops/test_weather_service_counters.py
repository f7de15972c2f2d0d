"""The weather service's counters, which the async-operator tests read for ``capacity``: a
request still running from before ``reset()`` is in none of the new counters (it was carried
into ``in_flight`` and never left it, and a test under load saw 13 requests at once where at
most 12 were its own). The real service on 127.0.0.1."""

from __future__ import annotations

import threading
import time

import httpx

from sparkglass.demo.weather_service import WeatherService


def test_a_request_from_before_a_reset_is_not_counted_after_it(weather: WeatherService) -> None:
    slow = threading.Thread(
        target=lambda: httpx.get(f"{weather.url}/echo/straggler?delay_ms=1500", timeout=30)
    )
    slow.start()
    deadline = time.monotonic() + 30
    while weather.stats().in_flight < 1:
        assert time.monotonic() < deadline, "the slow request never reached the service"
        time.sleep(0.01)
    weather.reset()
    assert (weather.stats().in_flight, weather.stats().max_in_flight) == (0, 0)
    assert httpx.get(f"{weather.url}/echo/mine", timeout=30).status_code == 200
    slow.join(30)
    assert not slow.is_alive()
    stats = weather.stats()
    assert (stats.requests, stats.in_flight, stats.max_in_flight) == (1, 0, 1)
