"""Attack on the DataSample admission webhook (``operator/admission.py``): a Pod that reaches
the webhook's port forges AdmissionReviews whose filters misuse a guessed column, and reads
the column's type (and a struct's fields) off the denial, which used to relay the first line
of Spark's analysis error: ``[DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES] ... ("INT" and
"DATE")``.

The real operator process and webhook (as in ``test_admission_webhook.py``); the driver's
round check answers with the words a real driver (Spark 4) sends for each filter, recorded
from ``tests/security/test_round_requests.py``'s application, plus the older Spark wording.
A denial may say which field is wrong and that a column is unknown or the filter invalid;
nothing about the vertex's schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.operator import conftest as operator_tests
from tests.operator.conftest import OperatorProcess, StrictApiServer
from tests.support import admission_webhook
from tests.support.admission_webhook import Webhook, denied
from tests.support.datasamples import ScriptedDriver, running_app, sample_body, serve_driver
from tests.support.scripted_driver import VertexScript

pytestmark = pytest.mark.timeout(180)

operator = operator_tests.operator
webhook_tls = admission_webhook.webhook_tls
operator_args = admission_webhook.operator_args
webhook = admission_webhook.webhook

_PLAN = (
    "\n'Project [to_json((ignoreNullFields,false), struct(carrier, carrier#132, flight, "
    "flight#133, dep_delay, dep_delay#136), Some(UTC)) AS render#156]\n"
    "+- LocalRelation <empty>, [carrier#132, flight#133, dep_delay#136]\n"
)

#: filter -> what the driver's round check answers for it (the ``error`` of its 400).
REFUSALS: dict[str, str] = {
    "flight = date'2020-01-01'": (
        'filter: [DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES] Cannot resolve "(flight = DATE '
        "'2020-01-01')\" due to data type mismatch: the left and right operands of the binary "
        'operator have incompatible types ("INT" and "DATE"). SQLSTATE: 42K09; line 1 pos 0;'
        + _PLAN
    ),
    "CASE WHEN carrier THEN 1 END = 1": (
        'filter: [DATATYPE_MISMATCH.UNEXPECTED_INPUT_TYPE] Cannot resolve "CASE WHEN carrier '
        'THEN 1 END" due to data type mismatch: The first parameter requires the "BOOLEAN" '
        'type, however "carrier" has the type "STRING". SQLSTATE: 42K09; line 1 pos 0;' + _PLAN
    ),
    "cast(route as struct<a:int>) is null": (
        'filter: [DATATYPE_MISMATCH.CAST_WITHOUT_SUGGESTION] Cannot resolve "route" due to '
        'data type mismatch: cannot cast "STRUCT<origin: STRING, dest: STRING, miles: INT>" '
        'to "STRUCT<a: INT>". SQLSTATE: 42K09; line 1 pos 0;' + _PLAN
    ),
    "flight.x = 1": (
        'filter: [INVALID_EXTRACT_BASE_FIELD_TYPE] Can\'t extract a value from "flight". '
        'Need a complex type [STRUCT, ARRAY, MAP] but got "INT". SQLSTATE: 42000; line 1 pos 0'
    ),
    "route.zz = 1": (
        "filter: [FIELD_NOT_FOUND] No such struct field `zz` in `origin`, `dest`, `miles`. "
        "SQLSTATE: 42704; line 1 pos 0"
    ),
    # Spark 3's words for the same mistakes: no error class, the types in lower case.
    "flight = date'2021-01-01'": (
        "filter: cannot resolve '(flight = DATE '2021-01-01')' due to data type mismatch: "
        "differing types in '(flight = DATE '2021-01-01')' (int and date).; line 1 pos 0;"
    ),
    "carier = 'UA' or route is null": (
        "filter: cannot resolve 'carier' given input columns: [carrier, flight, route]; "
        "line 1 pos 0;"
    ),
}

#: What the answers above reveal of the schema; none of it may reach the denial.
SCHEMA_WORDS = (
    "INT", "int", "STRING", "string", "DATE", "date", "BOOLEAN", "STRUCT", "struct", "ARRAY",
    "origin", "dest", "miles", "carrier", "dep_delay", "route#", "SQLSTATE", "Project",
)  # fmt: skip


@dataclass
class SchemaAnsweringDriver(ScriptedDriver):
    """The scripted driver whose round check refuses each filter of ``refusals`` as the real
    driver does (a 400 naming ``filter``), and answers the rest as before."""

    refusals: dict[str, str] = field(default_factory=lambda: dict(REFUSALS))

    def script(self, vertex: str) -> VertexScript:
        script = super().script(vertex)
        script.refuse_filter = self.refusals.get
        return script


@pytest.fixture()
async def driver() -> AsyncIterator[SchemaAnsweringDriver]:
    d = SchemaAnsweringDriver()
    runner = await serve_driver(d)
    yield d
    await runner.cleanup()


async def test_a_denial_names_the_field_but_no_type_and_no_struct_field(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: SchemaAnsweringDriver,
    webhook: Webhook,
) -> None:
    """Each forged review misuses a guessed column so that Spark's analyzer names its type
    (or lists a struct's fields); the denial says the filter is invalid at the vertex, in the
    webhook's own words."""
    await running_app(kube, operator, driver)
    for i, filter_sql in enumerate(REFUSALS):
        message = denied(await webhook.review(sample_body(f"t{i}", "parse", filter=filter_sql)))
        assert message.startswith("spec.filter: "), message
        leaked = [w for w in SCHEMA_WORDS if w in message.removeprefix("spec.filter: ")]
        assert not leaked, (filter_sql, message)
        assert "'parse'" in message, message
    assert driver.calls["check:parse"] == len(REFUSALS)


async def test_an_unknown_column_is_named_as_the_review_wrote_it(
    kube: StrictApiServer,
    operator: OperatorProcess,
    driver: SchemaAnsweringDriver,
    webhook: Webhook,
) -> None:
    """Spark's unresolved-column error with its suggestions: the denial names the column the
    review asked for, none of the vertex's."""
    await running_app(kube, operator, driver)
    driver.refusals["carier = 'UA'"] = (
        "filter: [UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function parameter "
        "with name `carier` cannot be resolved. Did you mean one of the following? [`carrier`, "
        "`dest`, `origin`, `flight`, `dep_delay`]. SQLSTATE: 42703; line 1 pos 0;" + _PLAN
    )
    message = denied(await webhook.review(sample_body("u", "parse", filter="carier = 'UA'")))
    assert message == "spec.filter: unknown column `carier` at vertex 'parse'", message
    # A filter that does not parse: the parser's words depend on the filter only.
    driver.refusals["carrier = 'UA' AND ("] = (
        "filter: \n[PARSE_SYNTAX_ERROR] Syntax error at or near '(': extra input '('. "
        "SQLSTATE: 42601 (line 1, pos 19)\n\n== SQL ==\ncarrier = 'UA' AND (\n---^^^\n"
    )
    message = denied(await webhook.review(sample_body("p", "parse", filter="carrier = 'UA' AND (")))
    assert message == (
        "spec.filter: [PARSE_SYNTAX_ERROR] Syntax error at or near '(': extra input '('. "
        "(line 1, pos 19)"
    ), message
