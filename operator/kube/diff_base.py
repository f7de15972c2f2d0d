"""Where kopf remembers the last spec it handled: a digest in one small annotation.

kopf detects a spec change by comparing the object with the essence it stored after the last
pass. Its default storage writes the whole spec as JSON into an annotation, and the API server
refuses every write of an object whose annotations pass 256 KiB: a SparkApplication with a
large sparkConf would never reconcile again. The reconciler reads the spec from the object on
every pass and needs only to know *that* it changed, so a digest of the spec (71 bytes,
whatever the spec's size) serves the same ``on.update(field="spec")`` handler.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, cast

import kopf


class SpecDigestStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation storage, holding ``{"spec": {"sha256": <hex>}}`` instead of the spec.

    A change of the spec changes the digest, a diff at ``spec.sha256``, which kopf reports to
    handlers filtered on ``field="spec"``; nothing else of the object is compared."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        spec = json.dumps(dict(body.get("spec") or {}), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(spec.encode()).hexdigest()
        return cast(kopf.BodyEssence, {"spec": {"sha256": digest}})
