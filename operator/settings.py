"""The operator process's configuration (from ``sparkglass operator run`` options)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

from sparkglass.runtime.contract.datasample_status import DEFAULT_STATUS_BYTES

from .kube.leader_election import ElectionConfig
from .pod_privileges import DEFAULT_ALLOWED_SERVICE_ACCOUNTS, parse_service_accounts
from .results import DEFAULT_TOKEN_FILE as DEFAULT_SERVICE_TOKEN_FILE
from .spark_conf import DriverEnvironment

#: Default ``ttlSecondsAfterFinished`` of DataSamples whose spec sets none: one hour.
DEFAULT_TTL_SECONDS = 3600
#: The CRD's maximum of ``ttlSecondsAfterFinished`` (one year).
MAX_TTL_SECONDS = 31_536_000
#: Bounds of ``api_qps`` (requests per second) and ``api_burst`` (requests at once): past
#: them a single replica would be a load test of its API server, not a client of it.
MIN_API_QPS, MAX_API_QPS = 1.0, 1000.0
MIN_API_BURST, MAX_API_BURST = 1, 5000
#: Default and bounds of ``full_resync_seconds`` (0: every resync is a full pass).
DEFAULT_FULL_RESYNC_SECONDS = 300.0
MAX_FULL_RESYNC_SECONDS = 86_400.0
#: Default of ``progress_seconds``: a streaming driver's counts change with every
#: micro-batch, so each publish is a status write; one a minute keeps a running application
#: within its API budget (about 2 requests a minute with the full resync), at the price of
#: a page graph up to a minute (plus one resync) behind in Kubernetes mode.
DEFAULT_PROGRESS_SECONDS = 60.0


@dataclass(frozen=True)
class WebhookConfig:
    """Where the DataSample admission webhook (:mod:`.admission`) listens, and its TLS
    certificate and key files (PEM). ``port`` 1–65535 (raises ``ValueError`` naming it)."""

    cert_file: str
    key_file: str
    port: int = 9443
    address: str = "0.0.0.0"

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"webhook port={self.port} is out of range: allowed 1–65535")


@dataclass(frozen=True)
class OperatorConfig:
    """Everything the handlers need besides the objects themselves.

    ``namespaces`` empty means cluster-wide. Intervals are seconds. ``max_status_bytes``
    caps the JSON size of the records a DataSample's status holds (etcd objects are small;
    the full result goes to the store). ``service_url`` is the sparkglass service's base URL
    (for ``status.resultsURL``); ``store_url`` its SQLAlchemy database URL (where full
    results are saved). Either may be None: then that part is skipped.
    ``allow_cleartext_control``: send the control token over plain HTTP to a driver that
    was started without TLS (by an operator older than control TLS); off by default, such
    a DataSample then fails with a message saying to restart the application. ``standalone``:
    no leader election, this process acts at once (one replica, or tests); otherwise
    ``election`` says which Lease the replicas compete for (:func:`app.operate` raises
    ``ValueError`` when it is missing then). ``allowed_service_accounts``: the ServiceAccounts
    a SparkApplication's driver and executors may run as (:mod:`.pod_privileges`); the
    process reads them in one place, ``sparkglass operator run --allowed-service-account``
    (or its variable ``SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS``, which the chart sets), so a
    config built here never depends on the environment.
    """

    namespaces: tuple[str, ...] = ()
    standalone: bool = False
    election: ElectionConfig | None = None
    liveness_endpoint: str | None = "http://0.0.0.0:8080/healthz"
    metrics_port: int | None = 9090
    metrics_address: str = "0.0.0.0"
    resync_seconds: float = 10.0
    #: How often a live SparkApplication's pass reads everything from the API again (the
    #: application, its driver Pod, ConfigMap, Secret and Service): in between, resyncs
    #: decide from the watches what is due, at no request (:mod:`.sparkapplication`). 0:
    #: every resync reads everything, as before the watches.
    full_resync_seconds: float = DEFAULT_FULL_RESYNC_SECONDS
    #: Kubernetes API requests started per second at most, and at once at most (client-go's
    #: ``QPS`` and ``Burst``: a bucket of ``api_burst`` tokens refilled at ``api_qps`` per
    #: second); the Lease's renewals have their own client, outside this limit.
    api_qps: float = 20.0
    api_burst: int = 40
    #: How often a running driver's metrics are read and, when they changed, written into
    #: ``status.progress`` (0: never); the status is that much (plus a resync) behind.
    progress_seconds: float = DEFAULT_PROGRESS_SECONDS
    #: Publish the pipeline of the Kubeflow / Apache Spark operators' running applications
    #: for the service (:mod:`.foreign_pipeline`): each asks their driver once per driver Pod.
    #: Off unless the service lists them (the chart turns it on with them).
    publish_foreign_pipelines: bool = False
    poll_seconds: float = 1.0
    max_status_bytes: int = DEFAULT_STATUS_BYTES
    control_timeout_seconds: float = 10.0
    #: The service's address for people (``status.resultsURL``).
    service_url: str | None = None
    #: The service's address inside the cluster, where results are saved (default:
    #: ``service_url``); None with neither: no result leaves the operator but in the status.
    service_internal_url: str | None = None
    service_token_file: str = DEFAULT_SERVICE_TOKEN_FILE
    service_ca_file: str | None = None
    driver: DriverEnvironment = field(default_factory=DriverEnvironment)
    #: Records in DataSample status (etcd): None (default) when the operator hands results
    #: to a service, and then off; on without one, where the status is all there is.
    records_in_status: bool | None = None
    default_ttl_seconds_after_finished: int = DEFAULT_TTL_SECONDS
    allow_cleartext_control: bool = False
    allowed_service_accounts: tuple[str, ...] = DEFAULT_ALLOWED_SERVICE_ACCOUNTS
    #: The DataSample admission webhook every replica serves (None: not served).
    webhook: WebhookConfig | None = None

    def __post_init__(self) -> None:
        # Checked like the variable: a typo in a hand-built config must not pass silently.
        parse_service_accounts(
            ",".join(self.allowed_service_accounts), setting="allowed_service_accounts"
        )
        if not MIN_API_QPS <= self.api_qps <= MAX_API_QPS:
            raise ValueError(
                f"api_qps={self.api_qps} is out of range: allowed {MIN_API_QPS:g} to "
                f"{MAX_API_QPS:g} requests per second"
            )
        if not MIN_API_BURST <= self.api_burst <= MAX_API_BURST:
            raise ValueError(
                f"api_burst={self.api_burst} is out of range: allowed {MIN_API_BURST} to "
                f"{MAX_API_BURST} requests at once"
            )
        if not 0 <= self.full_resync_seconds <= MAX_FULL_RESYNC_SECONDS:
            raise ValueError(
                f"full_resync_seconds={self.full_resync_seconds} is out of range: allowed 0 "
                f"to {MAX_FULL_RESYNC_SECONDS:g} seconds"
            )
        ttl = self.default_ttl_seconds_after_finished
        if not 0 <= ttl <= MAX_TTL_SECONDS:
            raise ValueError(
                f"default_ttl_seconds_after_finished={ttl} is out of range: "
                f"allowed 0 to {MAX_TTL_SECONDS} seconds"
            )

    @property
    def result_service_url(self) -> str | None:
        """Where results are saved: the internal URL, else ``service_url``, else None."""
        return self.service_internal_url or self.service_url

    @property
    def status_record_bytes(self) -> int:
        """Byte bound of the records written into a DataSample status (0: none)."""
        on = self.records_in_status
        if on is None:
            on = self.result_service_url is None
        return self.max_status_bytes if on else 0

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    def watches(self, namespace: str) -> bool:
        """Whether ``namespace`` is one the operator watches: every one when cluster-wide,
        else one of :attr:`namespaces` matches it (kopf's pattern syntax: comma-separated
        globs, ``!`` excluding; a leading exclusion implies ``*`` before it)."""
        return self.clusterwide or any(_matches(namespace, p) for p in self.namespaces)


def _matches(namespace: str, pattern: str) -> bool:
    globs = [g.strip() for g in pattern.split(",")]
    if globs[0].startswith("!"):
        globs.insert(0, "*")
    first = matched = fnmatch.fnmatchcase(namespace, globs[0])
    for glob in globs[1:]:
        if glob.startswith("!"):
            matched = matched and not fnmatch.fnmatchcase(namespace, glob[1:])
        else:
            # A later inclusion only brings back what the first glob took and one excluded.
            matched = matched or (first and fnmatch.fnmatchcase(namespace, glob))
    return matched
