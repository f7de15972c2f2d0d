"""Reading kopf's in-memory indexes: the one current object under a key."""

from __future__ import annotations

import copy
from typing import Any


def indexed(index: Any, key: tuple[str, str]) -> dict[str, Any] | None:
    """A copy of the current object a kopf index holds under ``key``, or None when it holds
    none (or there is no index). kopf keys entries by uid as well, and two objects of one
    name never exist at once, so a second entry is a ghost (its deletion event lost in a
    watch gap, or not handled yet): the newest by ``creationTimestamp`` is the current one,
    and of two created in the same second (timestamps are whole seconds) the one not being
    deleted."""
    store = index.get(key) if index is not None else None
    if not store:
        return None
    found = max(
        store,
        key=lambda o: (
            str((o.get("metadata") or {}).get("creationTimestamp") or ""),
            not (o.get("metadata") or {}).get("deletionTimestamp"),
        ),
        default=None,
    )
    return copy.deepcopy(found) if found is not None else None
