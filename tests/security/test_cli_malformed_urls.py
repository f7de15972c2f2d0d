"""Attack on the command line's error path: a malformed URL in an option (``sparkglass sample
--service 'http://[::1'``) made the HTTP or database library raise deep inside the command,
and the user got its traceback (with, for a database URL, SQLAlchemy's own echo of the URL,
password included) instead of a message. Every option of the CLI that takes a URL is tried
here with URLs that do not parse, have no host, a bad port or another scheme: each is a
usage error (exit code 2, as typer answers a number out of range) on one line naming the
option and what it takes, before anything is started or asked, and never echoes the URL.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PASSWORD = "hunter2-not-shown"

#: (command line before the URL, the option, what the line must say is expected)
OPTIONS = [
    (["sample", "parse", "--token", "t"], "--service", "http:// or https://"),
    (["sample", "parse", "--token", "t"], "--endpoint", "http:// or https://"),
    (["operator", "run", "--standalone", "-n", "x"], "--service-url", "http:// or https://"),
    (["operator", "run", "--standalone", "-n", "x"], "--kubernetes-master", "k8s://"),
    (["operator", "run", "--standalone", "-n", "x"], "--service-internal-url", "http:// or https://"),
    (["serve"], "--database-url", "SQLAlchemy URL"),
    (["token", "list"], "--database-url", "SQLAlchemy URL"),
]

BAD_HTTP = [
    "http://[::1",  # the unclosed IPv6 bracket of the report
    f"http://user:{PASSWORD}@[::1",
    "http://[::1]:port",
    "http://127.0.0.1:99999",
    "notaurl",
    "ftp://127.0.0.1/",
    "http://",
    f"https://user:{PASSWORD}@127.0.0.1:8080",  # would be printed and logged
]
BAD_DATABASE = [
    "sqlite",
    f"postgresql://user:{PASSWORD}@[::1/db",
    f"postgresql://user:{PASSWORD}@db:port/db",
    "http://127.0.0.1/db",
]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKGLASS_")}
    return subprocess.run(
        [sys.executable, "-m", "sparkglass", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "COLUMNS": "250", **(env or {})},
    )


def assert_usage_error(out: subprocess.CompletedProcess[str], option: str, expected: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr and PASSWORD not in out.stderr, out.stderr[-3000:]
    assert out.stdout == ""
    lines = [line.strip(" │") for line in out.stderr.splitlines() if "Invalid value" in line]
    assert len(lines) == 1, out.stderr
    (line,) = lines
    assert f"'{option}'" in line and expected in line, line


def _cases() -> list[tuple[list[str], str, str, str]]:
    cases = []
    for before, option, expected in OPTIONS:
        database = expected == "SQLAlchemy URL"
        for url in BAD_DATABASE if database else BAD_HTTP:
            if option == "--kubernetes-master":
                if "://" not in url:
                    continue  # Spark reads k8s://host as https://host
                url = f"k8s://{url}"
            cases.append((before, option, expected, url))
    return cases


@pytest.mark.parametrize(("before", "option", "expected", "url"), _cases())
def test_a_malformed_url_is_one_line_naming_the_option(
    before: list[str], option: str, expected: str, url: str
) -> None:
    assert_usage_error(run(*before, option, url), option, expected)


def test_the_same_holds_for_a_url_from_the_environment() -> None:
    out = run("sample", "parse", "--token", "t", env={"SPARKGLASS_SERVICE_URL": "http://[::1"})
    assert_usage_error(out, "--service", "http:// or https://")
    assert "SPARKGLASS_SERVICE_URL" in out.stderr


def test_serve_driver_takes_name_equals_an_http_url() -> None:
    for spec in ("flights", "=http://127.0.0.1:4041", "flights=", "flights=http://[::1"):
        out = run("serve", "--driver", spec)
        assert_usage_error(out, "--driver", "expected")
        assert "NAME=URL" in out.stderr or "http:// or https://" in out.stderr, out.stderr
