"""Tables in the docs generated from the code (:mod:`sparkglass.runtime.contract.doc_sections`)
are current: the driver's route table, and the result body's fields, whose descriptions are
also the DataSample status counters' (crds/datasample.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkglass.crds.datasample import DataSampleStatus
from sparkglass.runtime.contract import sample_result
from sparkglass.runtime.contract.doc_sections import DocSection
from sparkglass.runtime.control import routes

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [routes.SECTION, sample_result.SECTION]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.name)
def test_the_docs_table_is_current(section: DocSection) -> None:
    text = (ROOT / section.doc).read_text()
    assert section.rendered(text) == text, f"run: {section.command}"


def test_every_result_field_is_in_the_table_with_a_description() -> None:
    table = sample_result.result_fields_table()
    for name, field in sample_result.DataSampleResult.model_fields.items():
        assert field.description, f"DataSampleResult.{name} has no description"
        assert f"| `{field.alias or name}` |" in table


@pytest.mark.parametrize(
    "field", ["total_truncated", "dropped_by_contention", "dropped_by_rate_limit"]
)
def test_the_status_counters_say_what_the_rest_body_says(field: str) -> None:
    rest = sample_result.DataSampleResult.model_fields[field].description
    assert DataSampleStatus.model_fields[field].description == rest


def test_a_doc_without_the_markers_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "doc.md").write_text("no table here\n")
    section = DocSection("t", "make t", Path("doc.md"), lambda: "| a |\n")
    with pytest.raises(ValueError, match=r"doc\.md: the markers of the t table are missing"):
        section.main([], root=tmp_path)


def test_check_reports_a_stale_doc_and_writes_nothing(tmp_path: Path) -> None:
    section = DocSection("t", "make t", Path("doc.md"), lambda: "| new |\n")
    stale = f"x\n{section.begin}| old |\n{section.end}y\n"
    (tmp_path / "doc.md").write_text(stale)
    assert section.main(["--check"], root=tmp_path) == 1
    assert (tmp_path / "doc.md").read_text() == stale
    assert section.main([], root=tmp_path) == 0
    assert (tmp_path / "doc.md").read_text() == f"x\n{section.begin}| new |\n{section.end}y\n"
