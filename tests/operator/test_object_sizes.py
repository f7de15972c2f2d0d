"""The operator's objects stay far below what etcd stores, at their largest settings.

etcd refuses an object over 1.5 MiB (the API server answers 500 ``etcdserver: request is too
large``) and every watcher receives every version of it. A DataSample's status holds records;
at the largest ``--max-status-bytes`` with the longest spec and the most of everything else
its status allows, the whole object stays under a third of that limit, and the test API
server (which enforces the limit and the CRD's schema) stores it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkglass.runtime.contract.datasample_status import MAX_STATUS_BYTES, encode
from sparkglass.runtime.contract.sample_result import DataSampleResult
from tests.support import structural
from tests.support.crd_schema import yaml_documents

REPO = Path(__file__).resolve().parents[2]
ETCD_LIMIT = 1536 * 1024


def _schema(name: str) -> dict[str, Any]:
    crd = yaml_documents(REPO / "crds" / f"{name}.yaml")[0]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def largest_result() -> DataSampleResult:
    """5,000 records (the cap of one response) of 10,000 characters (the longest record)
    over 50 subtasks, and 10,000 subtasks that failed."""
    samples = [
        {
            "subtaskIndex": s,
            "records": [
                {
                    "sampleTimestamp": 1_790_000_000_000 + i,
                    "data": json.dumps({"v": "\u00e9" * 9_980}),  # escaped: 6 bytes each
                    "dataType": "struct<v:string>",
                    "truncated": True,
                }
                for i in range(100)
            ],
        }
        for s in range(50)
    ]
    return DataSampleResult.model_validate(
        {
            "status": "PARTIAL",
            "totalRecordCount": 5000,
            "totalTruncated": True,
            "errorCode": "EXECUTOR_UNREACHABLE",
            "failedSubtasks": list(range(50, 10_050)),
            "samples": samples,
        }
    )


def test_a_datasample_at_its_largest_settings_stays_far_below_etcds_limit() -> None:
    status = encode(largest_result(), MAX_STATUS_BYTES)
    status = {k: v for k, v in status.items() if v is not None}
    status["message"] = "m" * 4096
    status["resultsURL"] = "https://sparkglass.example/" + "p" * 2000
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "R" * 1024,
            "message": "c" * 32768,
            "lastTransitionTime": "2026-11-28T00:00:00Z",
            "observedGeneration": 1,
        }
    ]
    sample = {
        "apiVersion": "sparkglass.io/v1alpha1",
        "kind": "DataSample",
        "metadata": {"name": "s" * 253, "namespace": "spark-jobs"},
        "spec": {
            "applicationRef": {"name": "a" * 253},
            "vertex": "v" * 63,
            "kind": "violations",
            "filter": "f" * 4096,
            "columns": [f"{i:03d}".ljust(256, "c") for i in range(200)],
            "expectation": "e" * 63,
        },
        "status": status,
    }
    stored = structural.admit(
        _schema("datasample"), sample, kind="DataSample", group="sparkglass.io"
    )
    size = len(json.dumps(stored, separators=(",", ":")).encode())
    assert status["recordsInStatus"] > 0 and status["samplesTruncated"]
    assert size < ETCD_LIMIT / 3, f"{size} bytes"
    assert not structural.object_too_large(stored)
