"""Another operator's SparkApplications (Kubeflow's, Apache Spark's) in the catalog.

In Kubernetes mode the service lists, next to sparkglass's own SparkApplications, the
Kubeflow spark-operator's (``sparkoperator.k8s.io/v1beta2``) and the Apache Spark operator's
(``spark.apache.org/v1``) applications that the operator serves: those whose
``spec.sparkConf`` sets ``spark.sparkglass.sampling.enabled=true`` (settings
``kubeflow_applications``, ``apache_spark_applications``; the chart's ``kubeflow.enabled``,
``apacheSparkOperator.enabled``).

They have no ``spec.pipeline``: their vertices are the pipeline description their driver
serves, which the operator (the only one holding the driver's token, and reaching only a
driver Pod it verified, over TLS pinned to its certificate) publishes in a ConfigMap
``<app>-sparkglass-pipeline`` owned by the application (:func:`published_description`). The
service never dials such a driver. The ConfigMap is display data: whoever may write
ConfigMaps in the namespace could write one too, so it is read only when it carries the
operator's labels and an owner reference to the application's uid, at most
:data:`~sparkglass.crds.datasample.MAX_FOREIGN_PIPELINE_BYTES` of it, and only vertex names
that are DNS-1123 labels, at most :data:`MAX_VERTICES`; nothing in it is ever an address or a
Secret name.

Who sees them: a caller with ``read`` in the namespace (as for every application) who may
also ``get`` that kind there (:class:`~.auth.Permission` ``READ_KUBEFLOW_APPLICATIONS``,
``READ_APACHE_SPARK_APPLICATIONS``); to anyone else such an application does not exist
(:func:`visible`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from sparkglass.crds.datasample import (
    APACHE_SPARK_API_VERSION,
    FOREIGN_PIPELINE_KEY,
    FOREIGN_PIPELINE_SUFFIX,
    KUBEFLOW_API_VERSION,
    MAX_FOREIGN_PIPELINE_BYTES,
)
from sparkglass.runtime.contract.description import PipelineDescription, check_vertex_name
from sparkglass.runtime.contract.errors import PipelineError
from sparkglass.runtime.contract.sampling_settings import PREFIX

from .auth import Permission

log = logging.getLogger(__name__)

#: The conf key that opts an application in (the operator and the driver read the same).
SAMPLING_ENABLED_KEY = PREFIX + "enabled"
#: Most vertices taken from a published pipeline: the largest pipeline a sparkglass
#: SparkApplication may declare (``spec.pipeline.vertices`` has at most 64 items).
MAX_VERTICES = 64
#: The operator's labels on the ConfigMap (``operator/names.py``: the service does not import
#: the operator).
LABEL_APP = "sparkglass.io/application"
LABEL_ROLE = "sparkglass.io/role"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "sparkglass-operator"
ROLE_PIPELINE = "pipeline"


@dataclass(frozen=True)
class ForeignKind:
    """One other operator's SparkApplication kind as the service reads it: its
    ``apiVersion`` and plural, the badge the page shows (``label``) and the permission a caller
    needs to see one."""

    api_version: str
    plural: str
    label: str
    permission: Permission

    @property
    def group(self) -> str:
        return self.api_version.partition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.partition("/")[2]

    @property
    def kind(self) -> str:
        return "SparkApplication"


KUBEFLOW = ForeignKind(
    KUBEFLOW_API_VERSION, "sparkapplications", "Kubeflow", Permission.READ_KUBEFLOW_APPLICATIONS
)
APACHE_SPARK = ForeignKind(
    APACHE_SPARK_API_VERSION,
    "sparkapplications",
    "Apache",
    Permission.READ_APACHE_SPARK_APPLICATIONS,
)
KINDS: dict[str, ForeignKind] = {k.api_version: k for k in (KUBEFLOW, APACHE_SPARK)}


def kind_of(api_version: str | None) -> ForeignKind | None:
    """The other operator's kind of an application row's ``api_version`` (None: sparkglass's
    own, or a local application)."""
    return KINDS.get(api_version) if api_version else None


def permission_to_see(api_version: str | None) -> Permission | None:
    """What a caller needs on top of ``read`` to see an application of ``api_version``.

    Raises :class:`LookupError` for an ``api_version`` no kind has (a row from a newer
    release): an application nobody can be shown to be allowed to see is seen by nobody."""
    if not api_version:
        return None
    kind = kind_of(api_version)
    if kind is None:
        raise LookupError(f"unknown application apiVersion {api_version!r}")
    return kind.permission


def sampling_requested(obj: dict[str, Any]) -> bool:
    """Whether the application's ``spec.sparkConf`` opts in to sampling (the operator serves
    only those: it creates their control Secret and runs their DataSamples)."""
    conf = (obj.get("spec") or {}).get("sparkConf")
    if not isinstance(conf, dict):
        return False
    return str(conf.get(SAMPLING_ENABLED_KEY, "")).strip().lower() == "true"


def pipeline_configmap_name(application: str) -> str:
    """``<application>-sparkglass-pipeline``: where the operator publishes the pipeline."""
    return f"{application}{FOREIGN_PIPELINE_SUFFIX}"


def _published_for(configmap: dict[str, Any], app: dict[str, Any], kind: ForeignKind) -> bool:
    meta = configmap.get("metadata") or {}
    app_meta = app.get("metadata") or {}
    labels = meta.get("labels") or {}
    if (
        labels.get(LABEL_APP) != app_meta.get("name")
        or labels.get(LABEL_ROLE) != ROLE_PIPELINE
        or labels.get(LABEL_MANAGED_BY) != MANAGED_BY
    ):
        return False
    uid = app_meta.get("uid")
    return any(
        bool(uid)
        and isinstance(ref, dict)
        and ref.get("uid") == uid
        and str(ref.get("apiVersion") or "").partition("/")[0] == kind.group
        and ref.get("kind") == kind.kind
        for ref in meta.get("ownerReferences") or []
    )


@dataclass(frozen=True)
class PublishedPipeline:
    """What the service makes of an application's published pipeline: the description to
    list (no vertices when it cannot be used) and why it cannot, shown as the application's
    ``planError`` (``None``: read, or not published yet)."""

    description: PipelineDescription
    problem: str | None = None


def published_description(
    app: dict[str, Any], configmap: dict[str, Any] | None, kind: ForeignKind
) -> PublishedPipeline:
    """The pipeline of another operator's application ``app``: what the operator published in
    ``configmap`` (:func:`pipeline_configmap_name`), or no vertices when there is none yet
    (the driver has not answered the operator), or it is not the operator's for this
    application (labels, owner reference to the application's uid), too large, or malformed
    (then with the reason). Vertex names that are not DNS-1123 labels, and inputs naming no
    published vertex, are dropped; at most :data:`MAX_VERTICES` are kept.

    Whoever may write ConfigMaps in the namespace chooses the text, so it is parsed by
    pydantic's own JSON parser, whose nesting is bounded (``json.loads`` of deeply nested
    arrays raised ``RecursionError``, which no caller expects), and only after its size is
    checked."""
    name = str((app.get("metadata") or {}).get("name") or "")
    empty = PipelineDescription(name=name, vertices=[])
    if configmap is None:
        return PublishedPipeline(empty)
    where = f"ConfigMap {pipeline_configmap_name(name)}"
    if not _published_for(configmap, app, kind):
        return PublishedPipeline(
            empty,
            f"pipeline not resolvable: {where} does not carry the operator's labels and an "
            "owner reference to this application; ignored",
        )
    text = (configmap.get("data") or {}).get(FOREIGN_PIPELINE_KEY)
    if not isinstance(text, str):
        return PublishedPipeline(
            empty, f"pipeline not resolvable: {where} has no {FOREIGN_PIPELINE_KEY}"
        )
    if len(text) > MAX_FOREIGN_PIPELINE_BYTES or len(text.encode()) > MAX_FOREIGN_PIPELINE_BYTES:
        return PublishedPipeline(
            empty,
            f"pipeline not resolvable: {where}: {FOREIGN_PIPELINE_KEY} is larger than "
            f"{MAX_FOREIGN_PIPELINE_BYTES} bytes",
        )
    try:
        published = PipelineDescription.model_validate_json(text)
    except ValidationError as exc:
        log.info("the published pipeline of %s is not a pipeline description", name)
        return PublishedPipeline(
            empty,
            f"pipeline not resolvable: {where}: {FOREIGN_PIPELINE_KEY} is not a pipeline "
            f"description ({_first_error(exc)})",
        )
    kept = []
    for vertex in published.vertices:
        try:
            check_vertex_name(vertex.name)
        except PipelineError:
            continue
        kept.append(vertex)
        if len(kept) == MAX_VERTICES:
            break
    names = {v.name for v in kept}
    vertices = [v.model_copy(update={"inputs": [i for i in v.inputs if i in names]}) for v in kept]
    return PublishedPipeline(PipelineDescription(name=name, vertices=vertices))


#: Longest reason quoted from a refused published pipeline.
_MAX_REASON_CHARS = 200


def _first_error(exc: ValidationError) -> str:
    """The first of pydantic's errors, where and what, in words without the input (the text
    is someone else's)."""
    first = exc.errors(include_input=False, include_url=False)[0]
    # A location names keys of someone else's document too: only printable characters are
    # kept (a NUL is refused by PostgreSQL's text columns, and would fail the whole refresh).
    where = ".".join(str(p) for p in first["loc"])
    said = f"{where}: {first['msg']}" if where else str(first["msg"])
    said = "".join(c if c.isprintable() else "?" for c in said)
    return said if len(said) <= _MAX_REASON_CHARS else said[: _MAX_REASON_CHARS - 1] + "…"
