"""The routes of the driver control endpoint, written once.

The endpoint (:mod:`.endpoint`) dispatches on :data:`ROUTES`; the route table in
``docs/architecture.md`` is generated from it (``python -m sparkglass.runtime.control.routes``,
checked by a test), so the two cannot drift.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from sparkglass.runtime.contract.doc_sections import DocSection

KIB, MIB = 1024, 1024 * 1024
#: The most of a round's answer a client reads: a full result of 5000 records of 10,000
#: characters is about 50 MB of JSON.
FULL_RESULT_BYTES = 64 * MIB


@dataclass(frozen=True)
class Route:
    """One route: ``template`` with ``{name}`` segments (one path segment each, percent
    decoded), the query parameters it reads, what it answers (Markdown), and the most of that
    answer a client reads (``max_answer``, bytes: past the largest valid answer, with room;
    the driver is the application's own code, so a client stops there)."""

    name: str
    method: str
    template: str
    query: tuple[str, ...]
    answer: str
    max_answer: int

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.template) + "$")

    def path(self, **params: str) -> str:
        """The path with ``params`` in place, each one path segment whatever it holds."""
        return re.sub(r"\{(\w+)\}", lambda m: quote(params[m.group(1)], safe=""), self.template)

    def match(self, path: str) -> dict[str, str] | None:
        """The path parameters when ``path`` is this route's (any method), else None."""
        found = self.pattern.match(path)
        return None if found is None else {k: unquote(v) for k, v in found.groupdict().items()}


#: Query parameters of a round's open (and of its check): the round request.
_ROUND_QUERY = ("samplingWindow", "kind", "filter", "columns", "expectation")
_READ_QUERY = ("subtaskIndex", "maxRecords")

ROUTES: tuple[Route, ...] = (
    Route(
        "healthz", "GET", "/healthz", (), '`{"status": "ok"}`; the only route without a token',
        KIB,
    ),
    Route("pipeline", "GET", "/api/v1/pipeline", (), "the pipeline description", 4 * MIB),
    Route(
        "settings", "GET", "/api/v1/settings", (),
        "the sampling settings (camelCase, durations in ms)", 64 * KIB,
    ),
    Route(
        "expectations", "GET", "/api/v1/expectations", (),
        '`{"expectations": [{vertex, name, action, passed, failed, passedLastBatch, '
        "failedLastBatch}]}`", 8 * MIB,
    ),
    Route("vertices", "GET", "/api/v1/vertices", (), '`{"vertices": [...]}`', MIB),
    Route(
        "progress", "GET", "/api/v1/progress", ("history",),
        "the pipeline's live metrics (`PipelineMetrics`, below); with `history=true` also "
        "their last minutes (`history`); 400 naming `history` for a value other than "
        "`true`/`false`/`1`/`0`; 404 when no pipeline is attached", 16 * MIB,
    ),
    Route(
        "open_round", "POST", "/api/v1/vertices/{vertex}/rounds",
        (*_ROUND_QUERY[:1], "idempotencyKey", *_ROUND_QUERY[1:]),
        "202 `PENDING` with `roundId`; with `idempotencyKey` (1–128 printable ASCII "
        "characters) a repeated request answers the round that key opened; 429 "
        "`FAILED`/`TOO_MANY_CONCURRENT_ROUNDS`; 200 `DISABLED`; 400 naming "
        "`kind`/`filter`/`columns`/`expectation`", FULL_RESULT_BYTES,
    ),
    Route(
        "round", "GET", "/api/v1/rounds/{roundId}", _READ_QUERY,
        "the round's result (`PENDING` while it runs); the last 200 finished rounds are kept",
        FULL_RESULT_BYTES,
    ),
    Route(
        "data_sample", "GET", "/api/v1/vertices/{vertex}/data-sample",
        (*_READ_QUERY, *_ROUND_QUERY[1:]),
        "lazy trigger + polling over the driver's per-vertex cache", FULL_RESULT_BYTES,
    ),
    Route(
        "round_check", "GET", "/api/v1/vertices/{vertex}/round-check", _ROUND_QUERY,
        'whether the open with these parameters would be taken, opening nothing: `{"accepted": '
        'true}`, `{"accepted": false}` when it would answer `DISABLED`, or the open\'s 400/404; '
        "503 while another check compiles (one at a time; the last 64 refusals are answered "
        "from memory). The operator's admission webhook asks it", 64 * KIB,
    ),
)  # fmt: skip


def route(name: str) -> Route:
    """The route called ``name``. Raises KeyError for another name."""
    for r in ROUTES:
        if r.name == name:
            return r
    raise KeyError(name)


def resolve(method: str, path: str) -> tuple[Route | None, dict[str, str], tuple[str, ...]]:
    """``(route, path parameters, methods)`` for a request: the route of ``method`` at
    ``path`` (None when there is none), its parameters, and every method ``path`` takes
    (empty: no route has that path, a 404; else a 405 names them)."""
    methods: list[str] = []
    for route in ROUTES:
        params = route.match(path)
        if params is None:
            continue
        if route.method == method:
            return route, params, (method,)
        methods.append(route.method)
    return None, {}, tuple(methods)


def size_text(n: int) -> str:
    """``n`` bytes as the docs and errors say it: in MiB or KiB when whole, else in bytes."""
    for unit, factor in (("MiB", MIB), ("KiB", KIB)):
        if n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"


def markdown_table() -> str:
    """The route table as Markdown (``docs/architecture.md``)."""
    lines = ["| method | path | answer | read up to |", "|---|---|---|---|"]
    for r in ROUTES:
        query = "[?" + "&".join(f"{q}=" for q in r.query) + "]" if r.query else ""
        lines.append(
            f"| {r.method} | `{r.template}{query}` | {r.answer} | {size_text(r.max_answer)} |"
        )
    return "\n".join(lines) + "\n"


#: The table in the docs, generated from :data:`ROUTES`.
SECTION = DocSection(
    "control routes",
    "python -m sparkglass.runtime.control.routes",
    Path("docs/architecture.md"),
    markdown_table,
)

if __name__ == "__main__":
    raise SystemExit(SECTION.main(sys.argv[1:]))
