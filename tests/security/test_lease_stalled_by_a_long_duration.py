"""Attack on leader election: one write of the Lease stalls the operator for decades.

Whoever may write the Lease ``sparkglass-operator`` (``create`` before the operator's first
start, or one ``patch``) could set ``holderIdentity`` to a name of theirs and
``leaseDurationSeconds`` to 2^31-1. A candidate that honours the duration written in the
Lease waits that long (68 years) for it to expire, so a single write, never renewed, stopped
every replica for good. The duration a candidate waits is now at most its own
``--lease-duration-seconds``: a foreign holder must keep renewing to keep the Lease (which is
what the Lease protocol gives anyone who may write it, see docs/security.md), and a stale
write expires like any other.

The operator is the real process against the kmock API server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operator.conftest import NAMESPACE, OperatorProcess, StrictApiServer, eventually

pytestmark = pytest.mark.timeout(120)


LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
FAST_LEASE = [
    "--lease-duration-seconds", "4",
    "--lease-renew-deadline-seconds", "3",
    "--lease-retry-period-seconds", "0.5",
]  # fmt: skip


async def test_a_never_renewed_lease_with_a_huge_duration_does_not_stall_the_operator(
    kube: StrictApiServer, kubeconfig: Path, crds_applied: None, tmp_path: Path
) -> None:
    squatted = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "sparkglass-operator", "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": "mallory",
            "leaseDurationSeconds": 2**31 - 1,
            "renewTime": "2026-01-01T00:00:00.000000Z",
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }
    resp = await kube.post(LEASE_PATH, json=squatted)
    assert resp.status in (200, 201), await resp.text()
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", FAST_LEASE, standalone=False)
    proc.start()
    try:
        await eventually(
            lambda: "leader election: waiting" in proc.output(),
            what="the operator to wait for the Lease",
            operator=proc,
        )
        # Nobody renews mallory's record: after the operator's own duration (4 s) plus a
        # retry period it takes the Lease, whatever duration the record claims.
        await eventually(
            lambda: "leader election: leading" in proc.output(),
            timeout=20,
            what="the operator to take over a Lease nobody renews",
            operator=proc,
        )
        lease = kube.stored("coordination.k8s.io/v1/leases", NAMESPACE, "sparkglass-operator")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] != "mallory"
        assert lease["spec"]["leaseDurationSeconds"] == 4
    finally:
        proc.stop()
