"""The objects one service instance shares between requests (built by ``create_app``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubernetes.client import CustomObjectsApi
from sqlalchemy.orm import Session, sessionmaker

from .app_cache import ApplicationCache
from .audit import AuditWriter
from .auth import Authenticator, Principal
from .auth.cache import TTLCache
from .auth.single_flight import SingleFlight
from .catalog import KubernetesCatalog
from .driver_trust import DriverTrust
from .metrics import ServiceMetrics
from .pipeline_progress import PipelineProgressReader
from .settings import Settings
from .shared_rounds import SharedRounds


@dataclass
class ServiceState:
    """Held in ``app.state.sparkglass``; reached from routes through dependencies."""

    settings: Settings
    sessions: sessionmaker[Session]
    authenticator: Authenticator
    coordinator: SharedRounds
    audit: AuditWriter
    metrics: ServiceMetrics
    catalog: KubernetesCatalog | None = None
    #: With access to the API server: where the result route reads the DataSample a result
    #: is handed over for (``execution.kubernetes.read_datasample``).
    datasamples: CustomObjectsApi | None = None
    applications: ApplicationCache = field(default_factory=ApplicationCache)
    #: The route layer's one-second decision caches (see dependencies.authorized_principal).
    principal_cache: TTLCache[Principal] = field(default_factory=TTLCache)
    decision_cache: TTLCache[bool] = field(default_factory=TTLCache)
    #: Their misses: one thread-pool call per key however many requests miss at once.
    principal_calls: SingleFlight[Principal] = field(default_factory=SingleFlight)
    decision_calls: SingleFlight[bool] = field(default_factory=SingleFlight)
    #: Live pipeline metrics read from the drivers (the graph's numbers).
    progress: PipelineProgressReader = field(default_factory=PipelineProgressReader)
    #: Local mode: the certificate pinned for each registered https:// driver.
    driver_trust: DriverTrust = field(default_factory=DriverTrust)
