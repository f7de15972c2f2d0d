"""The current object under a key of a kopf index: while a driver Pod is replaced, kopf's
index holds the old one (by its uid) beside the new one for a while, and the token must go
to the new one's address."""

from __future__ import annotations

from typing import Any

from sparkglass.operator.kube.indexes import indexed

KEY = ("spark-jobs", "flights-driver")


def pod(uid: str, created: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T05:00:00Z"
    return {"metadata": meta}


def test_the_pod_not_being_deleted_wins_over_a_newer_one_that_is() -> None:
    old = pod("a", "2026-11-29T04:00:00Z")
    going = pod("b", "2026-11-29T04:30:00Z", deleting=True)
    assert indexed({KEY: [going, old]}, KEY) == old


def test_the_newest_wins_among_live_ones_and_a_copy_is_returned() -> None:
    old, new = pod("a", "2026-11-29T04:00:00Z"), pod("b", "2026-11-29T04:30:00Z")
    found = indexed({KEY: [new, old]}, KEY)
    assert found == new and found is not new
    assert indexed({KEY: [old, new]}, KEY) == new


def test_nothing_under_the_key_or_no_index_is_none() -> None:
    assert indexed({}, KEY) is None
    assert indexed({KEY: []}, KEY) is None
    assert indexed(None, KEY) is None
