"""Standard ``metav1.Condition`` entries in a custom resource's status.

Tools such as Argo CD judge a resource by ``Ready`` and by ``observedGeneration`` versus
``metadata.generation``, so every status write goes through :func:`set_condition`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .timestamps import now_rfc3339


def set_condition(
    conditions: Sequence[dict[str, Any]] | None,
    *,
    type: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Return ``conditions`` with the condition ``type`` set (a new list; input untouched).

    ``status`` True/False/None maps to "True"/"False"/"Unknown". ``lastTransitionTime`` only
    moves when the status changes, as Kubernetes conventions require.
    """
    text = "Unknown" if status is None else ("True" if status else "False")
    result: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for c in conditions or ():
        if c.get("type") == type:
            previous = c
        else:
            result.append(dict(c))
    changed = previous is None or previous.get("status") != text
    entry: dict[str, Any] = {
        "type": type,
        "status": text,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": now_rfc3339()
        if changed or previous is None
        else previous.get("lastTransitionTime", now_rfc3339()),
    }
    if generation is not None:
        entry["observedGeneration"] = generation
    result.append(entry)
    return result


def get_condition(conditions: Sequence[dict[str, Any]] | None, type: str) -> dict[str, Any] | None:
    """The condition ``type``, or None."""
    for c in conditions or ():
        if c.get("type") == type:
            return c
    return None
