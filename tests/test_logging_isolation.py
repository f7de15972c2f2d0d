"""A test that configures logging in the test process leaves no trace for the next one (the
root conftest's ``_root_logging_restored``). The operator's CLI does configure it, on the
CliRunner's stderr, closed after the invoke; a later test's log records then went to a closed
stream, and Spark's listener thread hung in Py4J's error path under load. In file order."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from typer.testing import CliRunner


def _streams() -> list[Any]:
    return [
        getattr(h, "stream", None)
        for h in logging.getLogger().handlers
        if not type(h).__module__.startswith("_pytest")
    ]


def test_a_the_operator_cli_configures_logging_on_the_runners_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sparkglass.operator.app as operator_app
    from sparkglass.cli import _register, app

    _register()
    monkeypatch.setattr(operator_app, "run", lambda config: None)
    before = _streams()
    result = CliRunner().invoke(app, ["operator", "run", "--standalone", "-n", "spark-jobs"])
    assert result.exit_code == 0, result.output
    after = _streams()
    assert after != before and any(s is not None and s.closed for s in after)


def test_b_the_next_test_logs_to_no_closed_stream() -> None:
    assert not any(s is not None and getattr(s, "closed", False) for s in _streams())
    logging.getLogger("py4j.clientserver").info("a record like Py4J's, from a later test")
