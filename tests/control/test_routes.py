"""The driver's route table is written once (``runtime/control/routes.py``): the endpoint
dispatches on it, the client builds its paths from it, the docs' table is generated from it
(tests/docs/test_generated_sections.py)."""

from __future__ import annotations

import pytest

from sparkglass.runtime.control import routes


@pytest.mark.parametrize("route", routes.ROUTES, ids=lambda r: r.name)
def test_each_route_resolves_to_itself_with_its_segments(route: routes.Route) -> None:
    values = {"vertex": "a/b c", "roundId": "r-1"}
    path = route.path(**values)
    found, params, _ = routes.resolve(route.method, path)
    assert found == route
    assert params == {k: v for k, v in values.items() if "{" + k + "}" in route.template}


def test_a_path_with_another_method_names_the_allowed_one() -> None:
    assert routes.resolve("GET", "/api/v1/vertices/parse/rounds") == (None, {}, ("POST",))
    assert routes.resolve("GET", "/api/v1/nothing") == (None, {}, ())
