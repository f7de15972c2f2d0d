"""Reading kopf's in-memory indexes: the one current object under a key."""

from __future__ import annotations

import copy
from typing import Any


def indexed(index: Any, key: tuple[str, str]) -> dict[str, Any] | None:
    """A copy of the current object a kopf index holds under ``key``, or None when it holds
    none (or there is no index). kopf keys entries by uid as well, so while an object is
    replaced (a driver Pod of a new run) the old one may linger: the one not being deleted,
    then the newest by ``creationTimestamp``, is the current one."""
    store = index.get(key) if index is not None else None
    if not store:
        return None
    found = max(
        store,
        key=lambda o: (
            not (o.get("metadata") or {}).get("deletionTimestamp"),
            str((o.get("metadata") or {}).get("creationTimestamp") or ""),
        ),
        default=None,
    )
    return copy.deepcopy(found) if found is not None else None
