"""A running driver's live pipeline metrics, published in ``SparkApplication.status.progress``.

In Kubernetes execution mode the service holds no driver token (the operator does), so the
page's graph reads the metrics from the application's status. The operator asks the driver
(``GET /api/v1/progress``, through the same owned-objects-only access and pinned TLS as for
rounds: :mod:`.driver_access`) at most every ``progress_seconds`` (operator option
``--progress-seconds``, default 60 s; 0 turns it off) and writes the answer
(:func:`read_progress`), bounded whatever the driver, the application's own code, answers
(:func:`bound_progress`, :func:`progress_patch`).

Each publish is a status write, so an answer that differs from the published one only in
its times (``observedAt``, ``publishedAt``) writes nothing (:func:`same_progress`): an idle
pipeline costs no request. A streaming one's counts change with every micro-batch, so it
costs one write per ``progress_seconds``; the status, and the page's graph in Kubernetes
mode, are then up to that long (plus one resync) behind the driver.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from sparkglass.runtime.contract.expectations import MAX_EXPECTATIONS_PER_VERTEX
from sparkglass.runtime.control.client import AsyncControlClient, ControlError

from .context import OperatorContext
from .driver_access import DriverAccess, driver_access
from .timestamps import epoch_or_zero, now_rfc3339

log = structlog.get_logger(__name__)

#: Per-request timeout towards the driver, seconds: the pass holds the application's lock.
PROGRESS_TIMEOUT_S = 3.0
#: The most of the driver's metrics read, bytes: sixteen times what is published (the
#: status keeps :data:`MAX_PROGRESS_BYTES` of the declared vertices); the driver is the
#: application's code, and the operator reads it for every running application.
MAX_PROGRESS_ANSWER_BYTES = 1024 * 1024
#: Longest failed-query message kept in status (etcd objects are small; the driver log has
#: the whole exception).
MAX_FAILED_CHARS = 1000
#: Most vertices published: the largest pipeline the CRD admits (``spec.pipeline.vertices``
#: has at most 64 items), so a valid application never loses one.
MAX_PROGRESS_VERTICES = 64
#: Most expectations published per vertex: what a vertex may declare (the contract's bound,
#: and the CRD's ``maxProperties`` of ``expectations``).
MAX_PROGRESS_EXPECTATIONS = MAX_EXPECTATIONS_PER_VERTEX
#: Most bytes of ``status.progress`` as compact JSON. Without expectations 64 vertices take
#: about 17 KiB with every figure known (26 KiB at worst); the rest leaves room for a couple
#: of hundred expectations (about 190 bytes each),
#: far more than pipelines declare, while a status rewritten every ``--progress-seconds``
#: stays a small fraction of etcd's object limit (like a DataSample's ``maxStatusBytes``).
MAX_PROGRESS_BYTES = 64 * 1024


#: Keys of ``status.progress`` that change on every read whatever the pipeline does: the
#: driver's clock when it took the metrics, and the operator's when it read them.
TIMES = ("observedAt", "publishedAt")


def _published_at(status: dict[str, Any]) -> float:
    return epoch_or_zero((status.get("progress") or {}).get("publishedAt"))


def progress_due(
    status: dict[str, Any], now: float, interval_s: float, read_at: float = 0.0
) -> bool:
    """Whether the driver's metrics are due for a read at ``now`` (epoch seconds): the
    published ones (``status.progress.publishedAt``) and the last read (``read_at``, this
    process's record: a read that found nothing new, or no answer, writes no
    ``publishedAt``) are both at least ``interval_s`` old. Before anything was published,
    ``read_at`` does not count: a driver that is still starting is asked again at the next
    pass, so the first metrics appear soon. Never when ``interval_s`` is 0."""
    published = _published_at(status)
    last = max(published, read_at) if published else 0.0
    return interval_s > 0 and now - last >= interval_s


def _pruned(value: Any) -> Any:
    """``value`` without None entries: a merge patch's None deletes, so None equals absent."""
    if isinstance(value, Mapping):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def same_progress(bounded: Mapping[str, Any], previous: Any) -> bool:
    """Whether ``bounded`` (what :func:`bound_progress` made of an answer) says what the
    stored ``previous`` (``status.progress``) says, but for :data:`TIMES`: then writing it
    would change nothing anyone reads but its age."""
    if not isinstance(previous, Mapping):
        return False

    def content(entry: Mapping[str, Any]) -> Any:
        return _pruned({k: v for k, v in entry.items() if k not in TIMES})

    return bool(content(bounded) == content(previous))


async def read_progress(ctx: OperatorContext, app: dict[str, Any]) -> dict[str, Any] | None:
    """The driver's metrics as a status entry, or None when there is none to publish (no
    running driver of the application's own, no token, a refused or untrusted driver, no
    answer, or one that differs from the published metrics only in its times:
    :func:`same_progress`). Never raises for the driver's failures; ``ApiError`` from the
    API server does.

    The entry is the :class:`~sparkglass.runtime.contract.pipeline_metrics.PipelineMetrics`
    shape (its ``observedAt``: the driver's clock, ms), plus ``publishedAt`` (RFC 3339, the
    operator's clock, when it was read), with only the vertices of the pipeline in the
    application's spec. A driver that does not answer costs the reconcile pass at most
    :data:`PROGRESS_TIMEOUT_S` and leaves the last published metrics in place (their
    ``observedAt`` says how old they are)."""
    access = await driver_access(ctx, app)
    if not isinstance(access, DriverAccess) or access.refusal or not access.token:
        return None
    meta = app["metadata"]
    try:
        async with AsyncControlClient(
            access.endpoint,
            access.token,
            timeout_s=PROGRESS_TIMEOUT_S,
            tls=access.tls,
            max_answer_bytes=MAX_PROGRESS_ANSWER_BYTES,
        ) as driver:
            metrics = await driver.progress()
    except (ControlError, ValueError) as exc:
        log.info(
            "driver progress unavailable",
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            reason=type(exc).__name__,
        )
        return None
    entry = metrics.model_dump(mode="json", by_alias=True)
    entry["publishedAt"] = now_rfc3339()
    # The driver is the application's own code: publish only the vertices of the pipeline
    # the spec declares (what the page can draw), so the status stays the pipeline's size
    # whatever names a driver sends.
    declared = [
        str(v.get("name"))
        for v in ((app.get("spec") or {}).get("pipeline") or {}).get("vertices") or []
        if isinstance(v, dict)
    ]
    bounded = bound_progress(entry, declared)
    if bounded.get("truncated"):
        log.info(
            "driver progress truncated to fit status.progress",
            namespace=meta.get("namespace"),
            name=meta.get("name"),
            max_bytes=MAX_PROGRESS_BYTES,
        )
    previous = (app.get("status") or {}).get("progress")
    if same_progress(bounded, previous):
        return None
    return progress_patch(bounded, previous)


def _json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (ASCII-escaped, so characters are bytes)."""
    return len(json.dumps(value, separators=(",", ":")))


def bound_progress(entry: Mapping[str, Any], declared: Iterable[str]) -> dict[str, Any]:
    """``entry`` (a ``PipelineMetrics`` dump plus ``publishedAt``) within the status bounds.

    Keeps the vertices named in ``declared`` (in that order, at most
    :data:`MAX_PROGRESS_VERTICES`), each with at most :data:`MAX_PROGRESS_EXPECTATIONS`
    expectations (the driver's order), and the whole at most :data:`MAX_PROGRESS_BYTES` of
    compact JSON: vertices' row counts first (the graph needs them), then expectations taken
    round-robin over the vertices (first of each, then second of each...), so that a vertex
    with many expectations cannot crowd out the others; the first one that does not fit
    ends the filling. ``failed`` is cut to :data:`MAX_FAILED_CHARS`. ``truncated`` says
    whether anything was left out. The status lives in etcd (objects of at most ~1.5 MiB,
    rewritten on every publish) and every reader of the application receives it, hence the
    bounds.
    """
    # The history (minutes of series, for the service's page) never goes into status.
    out: dict[str, Any] = {
        k: v for k, v in entry.items() if k not in ("vertices", "truncated", "history")
    }
    if out.get("failed"):
        out["failed"] = str(out["failed"])[:MAX_FAILED_CHARS]
    given = entry.get("vertices") or {}
    names = [n for n in dict.fromkeys(declared) if isinstance(given.get(n), Mapping)]
    truncated = len(names) > MAX_PROGRESS_VERTICES
    vertices: dict[str, dict[str, Any]] = {}
    out["vertices"] = vertices
    # Measured with truncated=false, the longer of the two literals: the size only shrinks
    # when it turns true.
    out["truncated"] = False
    size = _json_size(out)
    waiting: dict[str, list[tuple[str, Any]]] = {}
    for name in names[:MAX_PROGRESS_VERTICES]:
        metrics = given[name]
        vertex = {k: v for k, v in metrics.items() if k != "expectations"}
        vertex["expectations"] = {}
        cost = _json_size(name) + 1 + _json_size(vertex) + (1 if vertices else 0)
        if size + cost > MAX_PROGRESS_BYTES:
            truncated = True
            break
        vertices[name] = vertex
        size += cost
        expectations = metrics.get("expectations")
        items = list(expectations.items()) if isinstance(expectations, Mapping) else []
        truncated |= len(items) > MAX_PROGRESS_EXPECTATIONS
        waiting[name] = items[:MAX_PROGRESS_EXPECTATIONS]
    full = False
    for i in range(MAX_PROGRESS_EXPECTATIONS):
        for name, items in waiting.items():
            if i >= len(items):
                continue
            kept = vertices[name]["expectations"]
            ename, counts = items[i]
            cost = _json_size(ename) + 1 + _json_size(counts) + (1 if kept else 0)
            if size + cost > MAX_PROGRESS_BYTES:
                full = True
                break
            kept[ename] = counts
            size += cost
        if full:
            break
    out["truncated"] = truncated or full
    return out


def progress_patch(bounded: dict[str, Any], previous: Any) -> dict[str, Any]:
    """``bounded`` as a merge patch over ``previous`` (the status's current
    ``progress``): vertices and expectations of ``previous`` that ``bounded`` does not hold
    are set to ``None`` (a merge patch's delete), so that the stored status becomes exactly
    ``bounded`` instead of the union of every publish (a JSON merge patch keeps map keys it
    does not name, so a driver naming new expectations on each answer would otherwise grow
    the status without bound)."""
    patch = dict(bounded)
    old_vertices = previous.get("vertices") if isinstance(previous, Mapping) else None
    if not isinstance(old_vertices, Mapping):
        return patch
    vertices: dict[str, Any] = dict(bounded.get("vertices") or {})
    for name, old in old_vertices.items():
        if name not in vertices:
            vertices[name] = None
            continue
        old_expectations = old.get("expectations") if isinstance(old, Mapping) else None
        if not isinstance(old_expectations, Mapping):
            continue
        gone = [e for e in old_expectations if e not in vertices[name]["expectations"]]
        if gone:
            vertices[name] = {
                **vertices[name],
                "expectations": {
                    **vertices[name]["expectations"],
                    **dict.fromkeys(gone),
                },
            }
    patch["vertices"] = vertices
    return patch
