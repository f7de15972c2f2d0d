"""A DataSample's result as the operator hands it to the service, and the service's answer.

The operator runs a DataSample's round and PUTs the whole result to the service
(``PUT /api/v1/namespaces/{namespace}/datasamples/{name}/result``), which saves it in the
round of the DataSample's ``metadata.uid``. The status then carries only the phase, the
counts and ``resultsURL``: records leave etcd. Spark-free: the service and the operator
import it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sparkglass.runtime.contract.sample_result import DataSampleResult

#: Longest DataSample uid accepted (the API server's are 36-character UUIDs).
MAX_UID_LENGTH = 253
#: Longest ``RoundRequest.key()`` accepted: every field of a DataSample's spec at its CRD
#: maximum (filter 4096, 200 columns of 256 characters, expectation names), JSON-escaped.
MAX_REQUEST_KEY_LENGTH = 256 * 1024


class ResultUpload(BaseModel):
    """The body of the PUT: whose result it is and the result itself."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    uid: str = Field(
        min_length=1,
        max_length=MAX_UID_LENGTH,
        description="The DataSample's metadata.uid (the API server's, never a client's).",
    )
    application: str = Field(min_length=1, max_length=253, description="spec.applicationRef.name.")
    vertex: str = Field(min_length=1, max_length=63, description="spec.vertex.")
    request_key: str = Field(
        # A DataSample may ask for a 4096-character filter and 200 columns of 256: its key,
        # their JSON, is far longer than either.
        max_length=MAX_REQUEST_KEY_LENGTH,
        description="The DataSample's RoundRequest.key(): what it asked for beyond a plain "
        "round (empty when nothing).",
    )
    started_at_ms: int | None = Field(
        default=None, ge=0, description="When the round opened, ms since the epoch."
    )
    max_record_length: int = Field(
        ge=1,
        le=1_000_000,
        description="The application's max-record-length: the records' cap, checked again.",
    )
    result: DataSampleResult


class ResultSaved(BaseModel):
    """The answer: the store's round id (the round the service serves the result as)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    round_id: str
