"""``sparkglass sample VERTEX``: one vertex's data sample from a driver control endpoint."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import typer
from rich.console import RenderableType

from . import urls

if TYPE_CHECKING:
    from sparkglass.runtime.control.client import ControlError


def register(app: typer.Typer) -> None:
    """Add the ``sample`` command to ``app``."""
    app.command(
        "sample",
        help=(
            "Print the records sampled at the output of VERTEX of a running pipeline, grouped "
            "by subtask (Spark partition), as a table or `--json` (the REST body).\n\n"
            "Asks the driver control endpoint (lazy trigger + polling): the first call starts "
            "a sampling round and this command waits up to `--wait` seconds for it; a result "
            "younger than the refresh interval is printed at once.\n\n"
            "With `--service URL` it asks the sparkglass service instead (authenticated, shared "
            "rounds, audited); `--application` and `--namespace` name the pipeline there.\n\n"
            "`--kind violations|errors`, `--filter`, `--columns` and `--expectation` narrow the "
            "round, with either (through the service: local mode, a sampler token).\n\n"
            "Example: `sparkglass sample parse --endpoint http://127.0.0.1:4045 --token "
            "$SPARKGLASS_CONTROL_TOKEN --max-records 20`\n\n"
            "Example: `sparkglass sample parse --service http://127.0.0.1:8080 --token "
            "$SPARKGLASS_SERVICE_TOKEN --application flights --kind violations "
            "--expectation not-early --filter \"carrier = 'UA'\"`"
        ),
    )(sample)


def sample(
    vertex: str = typer.Argument(..., help="Vertex name, e.g. parse."),
    endpoint: str | None = typer.Option(
        None,
        "--endpoint",
        envvar="SPARKGLASS_CONTROL_URL",
        callback=urls.http_url,
        help="Driver control endpoint URL (http:// or https://).",
    ),
    token: str = typer.Option(
        ..., "--token", envvar="SPARKGLASS_CONTROL_TOKEN", help="Bearer token (driver or service)."
    ),
    service: str | None = typer.Option(
        None,
        "--service",
        envvar="SPARKGLASS_SERVICE_URL",
        callback=urls.http_url,
        help="sparkglass service URL (http:// or https://).",
    ),
    application: str = typer.Option(
        "flights", "--application", help="With --service: the application's name."
    ),
    namespace: str = typer.Option(
        "local", "--namespace", help="With --service: the application's namespace."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON body instead of a table."),
    subtask: int | None = typer.Option(None, "--subtask", min=0, help="Only this subtask."),
    max_records: int | None = typer.Option(
        None, "--max-records", min=1, max=5000, help="At most this many records (1–5000)."
    ),
    wait: float = typer.Option(30.0, "--wait", min=0, help="Seconds to wait for a round."),
    kind: str | None = typer.Option(
        None, "--kind", help="output (default), violations or errors: which rows to sample."
    ),
    filter_sql: str | None = typer.Option(
        None,
        "--filter",
        help="Spark SQL predicate over the vertex's columns, e.g. \"carrier = 'UA'\".",
    ),
    columns: str | None = typer.Option(
        None, "--columns", help="Comma-separated columns to return, in order."
    ),
    expectation: str | None = typer.Option(
        None, "--expectation", help="With --kind violations: only this expectation's rows."
    ),
) -> None:
    import httpx

    from sparkglass.cli import fail
    from sparkglass.runtime.contract.errors import InvalidParameterError
    from sparkglass.runtime.contract.round_request import round_request

    try:
        request = round_request(kind, filter_sql, columns, expectation)
    except InvalidParameterError as exc:
        raise fail(f"--{exc.field}: {exc}") from None
    if service:
        from .extras import require

        require("service", "sparkglass sample --service")
        from sparkglass.service.client import ServiceClient, ServiceError

        try:
            with ServiceClient(service, token) as client:
                result = client.sample(
                    application,
                    vertex,
                    namespace=namespace,
                    subtask_index=subtask,
                    max_records=max_records,
                    wait_seconds=wait,
                    poll_seconds=0.5,
                    request=None if request.is_plain() else request,
                )
        except ServiceError as exc:
            raise fail(str(exc)) from None
        except httpx.HTTPError as exc:
            raise fail(f"cannot reach {service}: {exc}") from None
        body = result.to_json_dict()
        if as_json:
            typer.echo(json.dumps(body, indent=2))
        else:
            _print_table(vertex, body)
        _exit_unless_fresh(vertex, wait, body)
        return
    if not endpoint:
        raise fail("give --endpoint (a driver control endpoint) or --service (the service)")
    from sparkglass.runtime.control.client import ControlClient, ControlError

    try:
        with ControlClient(endpoint, token) as driver:
            result = driver.wait_for_data_sample(
                vertex,
                subtask_index=subtask,
                max_records=max_records,
                timeout_s=wait,
                poll_interval_s=0.5,
                request=None if request.is_plain() else request,
            )
    except ControlError as exc:
        raise fail(_control_error_text(endpoint, exc)) from None
    body = result.to_json_dict()
    if as_json:
        typer.echo(json.dumps(body, indent=2))
    else:
        _print_table(vertex, body)
    _exit_unless_fresh(vertex, wait, body)


def _exit_unless_fresh(vertex: str, wait: float, body: dict[str, Any]) -> None:
    """Exit 1 unless ``body`` is the answer of a round that ended: a failed or still pending
    round, sampling off (``DISABLED``, with a line saying how to turn it on), or the previous
    round's answer (``stale``) when no new one ended in time."""
    if body.get("stale"):
        typer.echo(
            f"no new round of {vertex!r} ended within --wait {wait:g} s: the answer above is "
            "the previous round's (raise --wait, or see why the vertex has no data)",
            err=True,
        )
        raise typer.Exit(1)
    if body.get("status") == "DISABLED":
        typer.echo(
            f"sampling is off for this application, so {vertex!r} has no sample: it is on "
            "only where enabled (spark.sparkglass.sampling.enabled=true, or a "
            "SparkApplication's spec.sampling.enabled)",
            err=True,
        )
        raise typer.Exit(1)
    if body.get("status") in ("FAILED", "PENDING"):
        raise typer.Exit(1)


def _control_error_text(endpoint: str, exc: ControlError) -> str:
    if exc.status is None:
        return f"cannot reach {endpoint}: {exc}"
    if exc.detail is None:  # it answered, but not the contract
        return str(exc)
    return f"HTTP {exc.status}: {exc.detail}"


def _print_table(vertex: str, body: dict) -> None:
    from rich.console import Console

    Console().print(render_sample(vertex, body))


#: What each ``noDataReason`` means, for people.
NO_DATA_REASONS = {
    "NO_MICRO_BATCH": "the streaming query ran no micro-batch during the round",
    "NO_ROWS": "micro-batches ran, and this vertex emitted no row in them",
    "QUERY_NOT_ACTIVE": "no streaming query that runs this vertex is active",
}


def no_data_text(body: dict) -> str:
    """Why a ``NO_DATA`` body has no record, with the last micro-batch's time (UTC)."""
    reason = NO_DATA_REASONS.get(str(body.get("noDataReason")), "no row left the vertex")
    last = body.get("lastMicroBatchTimestamp")
    if last:
        reason += "; last micro-batch ended " + time.strftime(
            "%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(last) / 1000)
        )
    return f"no data: {reason}"


def render_sample(vertex: str, body: dict, limit: int | None = None) -> RenderableType:
    """A rich view of one data-sample body (the REST JSON): a summary line and a table.

    ``limit`` shows at most that many records (all when ``None``). Used by ``sparkglass
    sample`` and by the demo's samples-per-vertex display.
    """
    from rich.console import Group
    from rich.table import Table

    status = body.get("status")
    summary = (
        f"[bold]{vertex}[/]  status [bold]{status}[/]  round {body.get('roundId')}  "
        f"records {body.get('totalRecordCount', 0)}"
        + ("  [yellow](truncated)[/]" if body.get("totalTruncated") else "")
        + ("  [yellow](stale)[/]" if body.get("stale") else "")
        + f"  dropped: rate-limit {body.get('droppedByRateLimit', 0)}, "
        f"contention {body.get('droppedByContention', 0)}"
    )
    parts: list[RenderableType] = [summary]
    if body.get("errorCode"):
        failed = body.get("failedSubtasks") or []
        parts.append(f"[red]error {body['errorCode']}[/] failed subtasks: {failed}")
    if status == "DISABLED":
        parts.append("sampling is disabled (spark.sparkglass.sampling.enabled=false)")
        return Group(*parts)
    if status == "NO_DATA":
        parts.append(no_data_text(body))
        return Group(*parts)
    if body.get("materializedAt"):
        parts.append(
            "the vertex's materialized output (written "
            + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(body["materializedAt"] / 1000))
            + "), each row at most once"
        )
    records = [(g["subtaskIndex"], r) for g in body.get("samples", []) for r in g["records"]]
    types = {r["dataType"] for _, r in records}
    one_type = len(types) == 1
    if one_type:  # the usual case: say it once instead of on every row
        parts.append(f"type {types.pop()}")
    table = Table(show_lines=False)
    table.add_column("subtask", justify="right")
    table.add_column("time (UTC)")
    table.add_column("data", overflow="fold")
    if not one_type:
        table.add_column("type", overflow="fold")
    for subtask, record in records[:limit]:
        ms = record["sampleTimestamp"]
        stamp = time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"
        data = record["data"] + (" …" if record.get("truncated") else "")
        if record.get("expectations"):
            data += f"  [red]failed: {', '.join(record['expectations'])}[/]"
        if record.get("error"):
            data += f"  [red]{record['error']}[/]"
        row = [str(subtask), stamp, data] + ([] if one_type else [record["dataType"]])
        table.add_row(*row)
    parts.append(table)
    return Group(*parts)
