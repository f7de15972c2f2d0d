"""The newest known version of each object of one kind, fed by watch events and own writes.

An informer-style cache: kopf's watch delivers every change of a DataSample, and the
operator's own status patches answer with the object as written. Both land here, and a
version never replaces a newer one, so a step that just wrote ``status.roundId`` never reads
the object from before that write when the watch event of an older change arrives late.

"Newer" compares ``metadata.resourceVersion`` as integers. Kubernetes documents the value as
opaque, but every API server backed by etcd (and the test emulator) issues increasing
integers; a value that is not an integer is taken as newer, so the cache then follows the
last delivery, as a plain informer does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

#: ``(namespace, name)``.
Key = tuple[str, str]


def _version(obj: dict[str, Any]) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(text) if text is not None else None
    except (TypeError, ValueError):
        return None


def newer(candidate: dict[str, Any], known: dict[str, Any] | None) -> bool:
    """Whether ``candidate`` is a later version of the object than ``known`` (see module)."""
    if known is None:
        return True
    new, old = _version(candidate), _version(known)
    if new is None or old is None:
        return True
    return new > old


class ObjectCache:
    """Objects by ``(namespace, name)``; values are deep copies (callers may not mutate).

    ``drop`` names ``(top-level key, key)`` pairs not kept (e.g. ``("status", "samples")``:
    a DataSample's records, up to 64 KiB each, which no step reads), so memory and copying
    stay small with hundreds of objects retained.
    """

    def __init__(self, drop: tuple[tuple[str, str], ...] = ()) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._drop = drop

    def observe(self, obj: dict[str, Any]) -> bool:
        """Keep ``obj`` if it is newer than the known version; True when it was kept."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if not newer(obj, self._objects.get(key)):
            return False
        kept = dict(obj)
        for outer, inner in self._drop:
            if isinstance(kept.get(outer), dict) and inner in kept[outer]:
                kept[outer] = {k: v for k, v in kept[outer].items() if k != inner}
        self._objects[key] = copy.deepcopy(kept)
        return True

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest known version, or None."""
        return self._objects.get((namespace, name))

    def remove(self, namespace: str, name: str) -> None:
        """Forget a deleted object."""
        self._objects.pop((namespace, name), None)

    def items(self) -> Iterator[tuple[Key, dict[str, Any]]]:
        """Every known object (a snapshot of the keys: safe while the cache changes)."""
        for key in list(self._objects):
            obj = self._objects.get(key)
            if obj is not None:
                yield key, obj

    def __len__(self) -> int:
        return len(self._objects)
