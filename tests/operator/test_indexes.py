"""The current object under a key of a kopf index: kopf keys entries by uid too, and two
objects of one name never exist at once, so a second entry is a ghost (its deletion event
lost in a watch gap) and the token must go to the current object's address."""

from __future__ import annotations

from typing import Any

from sparkglass.operator.kube.indexes import indexed

KEY = ("spark-jobs", "flights-driver")


def pod(uid: str, created: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T05:00:00Z"
    return {"metadata": meta}


def test_the_newest_wins_even_when_it_is_being_deleted() -> None:
    """The ghost (an older Pod whose deletion was missed) never wins: its address may be
    another Pod's by now."""
    ghost = pod("a", "2026-11-29T04:00:00Z")
    going = pod("b", "2026-11-29T04:30:00Z", deleting=True)
    assert indexed({KEY: [ghost, going]}, KEY) == going


def test_within_one_second_the_one_not_being_deleted_wins() -> None:
    going = pod("a", "2026-11-29T04:00:00Z", deleting=True)
    new = pod("b", "2026-11-29T04:00:00Z")
    assert indexed({KEY: [new, going]}, KEY) == new
    assert indexed({KEY: [going, new]}, KEY) == new


def test_the_newest_wins_among_live_ones_and_a_copy_is_returned() -> None:
    old, new = pod("a", "2026-11-29T04:00:00Z"), pod("b", "2026-11-29T04:30:00Z")
    found = indexed({KEY: [new, old]}, KEY)
    assert found == new and found is not new
    assert indexed({KEY: [old, new]}, KEY) == new


def test_nothing_under_the_key_or_no_index_is_none() -> None:
    assert indexed({}, KEY) is None
    assert indexed({KEY: []}, KEY) is None
    assert indexed(None, KEY) is None
