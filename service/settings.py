"""The service's settings, all in one place (environment variables prefixed ``SPARKGLASS_``).

Example: ``SPARKGLASS_AUTH_MODE=kubernetes SPARKGLASS_DATABASE_URL=postgresql+psycopg://...``.
Durations are seconds (floats), except ``sampling_window``: a duration string in the one
grammar the CRDs and the driver accept (``3s``, ``1500ms``, ``1s500ms``; see
:mod:`sparkglass.runtime.contract.durations`), because it is handed on to them as written.
Nothing here is ever logged whole: it may hold a database password in ``database_url``.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from functools import cached_property
from pathlib import Path

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from sparkglass.runtime.contract.durations import format_duration_ms, parse_duration_ms
from sparkglass.runtime.contract.errors import SamplingSettingsError
from sparkglass.runtime.contract.sampling_settings import RANGES

from .store.cipher import StoreCipher

#: The namespace every application lives in when the service runs in local mode.
LOCAL_NAMESPACE = "local"

MiB = 1024 * 1024

#: An address or network of ``trusted_proxies``.
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AuthMode(StrEnum):
    """How callers are authenticated and authorized."""

    LOCAL = "local"
    """Static bearer tokens (a file or the store), each bound to a role."""
    KUBERNETES = "kubernetes"
    """TokenReview + SubjectAccessReview against the Kubernetes API server."""


class ExecutionMode(StrEnum):
    """How a sampling round is run."""

    LOCAL = "local"
    """The service calls the Spark driver's control endpoint itself."""
    KUBERNETES = "kubernetes"
    """The service creates a ``DataSample`` custom resource; the operator runs the round."""


def default_database_url() -> str:
    """SQLite file under the user's data directory (created on demand, mode 0700; the file
    itself is created 0600 by the store)."""
    data_dir = Path(platformdirs.user_data_dir("sparkglass", appauthor=False))
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return f"sqlite:///{data_dir / 'service.db'}"


class Settings(BaseSettings):
    """Every knob of the service. Construct directly in tests; from the environment in prod."""

    # Errors never echo the input: it may hold database_url with its password.
    model_config = SettingsConfigDict(
        env_prefix="SPARKGLASS_", extra="ignore", hide_input_in_errors=True
    )

    host: str = Field(default="127.0.0.1", description="Address uvicorn binds.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port uvicorn binds (0 = any).")
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL; empty means SQLite under the user data directory.",
    )
    auth_mode: AuthMode = AuthMode.LOCAL
    execution_mode: ExecutionMode = ExecutionMode.LOCAL
    tokens_file: Path | None = Field(
        default=None,
        description="Local mode: a file of `token,user,role` lines (role: viewer|sampler|admin).",
    )
    kube_api_url: str | None = Field(
        default=None,
        description="Kubernetes mode: API server URL; unset = in-cluster config, then kubeconfig.",
    )
    kube_insecure: bool = Field(
        default=False, description="Skip TLS verification of kube_api_url (tests only)."
    )
    kube_token: str | None = Field(
        default=None, description="Service account token for kube_api_url (else from config)."
    )
    authn_cache_seconds: float = Field(default=10.0, ge=0, description="TokenReview cache TTL.")
    authz_allow_cache_seconds: float = Field(default=10.0, ge=0, description="Allow-cache TTL.")
    authz_deny_cache_seconds: float = Field(default=5.0, ge=0, description="Deny-cache TTL.")
    refresh_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="For an application whose sampling settings do not state "
        "refresh-interval: a result is served from cache this long; at most one round per "
        "(application, vertex) starts per interval across replicas. Applications' own "
        "spark.sparkglass.sampling.refresh-interval (spec.sampling.refreshInterval) wins.",
    )
    round_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="For an application whose sampling settings do not state timeout: give "
        "up on a round after this long. Applications' own spark.sparkglass.sampling.timeout wins.",
    )
    round_grace_seconds: float = Field(
        default=10.0,
        ge=0,
        description="Extra wait beyond round_timeout_seconds before the service gives up "
        "(covers the sampling window, polling and the operator).",
    )
    sampling_window: str | None = Field(
        default=None,
        description="Sampling window asked for (a duration such as 3s or 1500ms, 1s-30s); "
        "unset: the application's spark.sparkglass.sampling.sampling-window.",
    )
    poll_interval_seconds: float = Field(
        default=0.25,
        gt=0,
        description="Local execution mode: how often a running round is read from the "
        "driver, seconds. (Kubernetes mode watches the DataSample instead.)",
    )
    retention_seconds: float = Field(
        default=7 * 24 * 3600.0, gt=0, description="Rounds and audit events older are deleted."
    )
    retention_check_seconds: float = Field(
        default=600.0, gt=0, description="How often the retention sweep runs."
    )
    audit_flush_seconds: float = Field(
        default=1.0, gt=0, description="Audit events are written in batches this often."
    )
    audit_buffer_events: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Most audit events held in memory (1-1000000) while the database cannot "
        "take them; beyond it the oldest are dropped, counted in "
        "sparkglass_audit_events_dropped_total and logged.",
    )
    audit_read_window_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="Identical reads (the same principal reading the same round of a vertex, "
        "or the same listing, from the same address with the same outcome) within this many "
        "seconds (0-3600) are audited as one event carrying their count and first and last "
        "time; 0: one event per read. Triggers, writes, admin actions and denials are always "
        "one event each.",
    )
    audit_read_buffer_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=0,
        le=1024 * 1024 * 1024,
        description="Most bytes (0-1 GiB, estimated) held by open read windows; when full, "
        "the oldest window is written early (nothing is lost, it just coalesces less).",
    )
    round_workers: int = Field(default=8, ge=1, description="Threads running rounds.")
    narrowed_rounds_per_application: int = Field(
        default=2,
        ge=1,
        le=1000,
        description="Most rounds with a kind, filter, columns or expectation one application "
        "may run at once on this replica (1-1000, at most narrowed_rounds_per_replica; default "
        "2, half of it): each distinct request has its own rounds, so without a cap one client "
        "asking many filters would take every round thread and delay every application's "
        "rounds, and one application alone cannot take every narrowed slot. Past it, a poll "
        "that would start one is answered 429 with Retry-After (or, when an older result "
        "exists, that result marked stale).",
    )
    narrowed_rounds_per_replica: int = Field(
        default=4,
        ge=1,
        le=1000,
        description="Most rounds with a kind, filter, columns or expectation all applications "
        "together may run at once on this replica (1-1000, below round_workers when that is "
        "more than 1; default 4, half of round_workers), "
        "so that narrowed rounds of a few applications never take every round thread from "
        "the plain rounds of all the others. Past it, as past "
        "narrowed_rounds_per_application.",
    )
    datasample_ttl_seconds: int = Field(
        default=600,
        ge=10,
        le=31_536_000,
        description="Kubernetes mode: ttlSecondsAfterFinished of the DataSamples the service "
        "creates, seconds (10-31536000; default 600). At least 10: the service checks that "
        "the DataSample it created still exists (its uid) when it reads the round's result.",
    )
    result_writers: str = Field(
        default="",
        max_length=4096,
        description="Who may save a DataSample's result (PUT /api/v1/namespaces/{namespace}/"
        "datasamples/{name}/result): the operator's identity, a Kubernetes username such as "
        "system:serviceaccount:sparkglass-system:sparkglass-operator (the chart sets it), or a "
        "local-mode user. Comma-separated in SPARKGLASS_RESULT_WRITERS. Empty (default): "
        "nobody, and every such request is answered 403.",
    )
    result_audience: str = Field(
        default="sparkglass-service",
        min_length=1,
        max_length=253,
        description="Kubernetes mode: the audience a result writer's token must be bound to "
        "(TokenReview spec.audiences). The chart gives the operator a projected token of this "
        "audience, so what it sends over the cluster network is no API server credential.",
    )
    max_result_bytes: int = Field(
        default=64 * MiB,
        ge=MiB,
        le=1024 * MiB,
        description="Largest DataSample result the operator may save, bytes of JSON (1 MiB-1 "
        "GiB; default 64 MiB: 5000 records at the default max-record-length of 10000 "
        "characters, with room for escaping). Larger is answered 413 before it is read.",
    )
    public_url: str | None = Field(
        default=None,
        description="Base URL this service is reachable at (for DataSample resultsURL).",
    )
    max_body_bytes: int = Field(
        default=MiB,
        ge=1024,
        le=64 * MiB,
        description="Largest request body accepted, bytes (1 KiB-64 MiB; default 1 MiB). A "
        "larger Content-Length is answered 413 before anything is read; a chunked body is cut "
        "off with 413 once it passes the limit.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Worker processes serving requests (1-64; default 1). Rounds are shared "
        "across workers through the store; each worker has its own result cache.",
    )
    gzip_min_bytes: int = Field(
        default=1024,
        ge=0,
        le=64 * MiB,
        description="Bodies of at least this many bytes are gzip-compressed for clients that "
        "send Accept-Encoding: gzip (0-64 MiB; default 1 KiB).",
    )
    result_cache_bytes: int = Field(
        default=64 * MiB,
        ge=0,
        le=16 * 1024 * MiB,
        description="Memory for rendered JSON bodies of finished results, bytes (0-16 GiB; "
        "default 64 MiB; 0 = no cache). Least recently used bodies go first; a body larger "
        "than a quarter of the budget is never cached: it is written from the store a page "
        "of records at a time, as every body that is not cached.",
    )
    result_concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="How many driver results are fetched and saved at once (each one "
        "subtask, at most 1000 records, at a time), and how many bodies are built for the "
        "cache at once (1-64; default 1).",
    )
    stream_concurrency: int = Field(
        default=8,
        ge=1,
        le=1024,
        description="How many result bodies are written from the store at once (1-1024; "
        "default 8). Each holds about one page of records (1 MiB of record data, or one "
        "record when a single one is larger) and one 256 KiB chunk. Bodies sent from the "
        "result cache need no slot.",
    )
    stream_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        le=600,
        description="How long a request waits for a free stream_concurrency slot before it "
        "is answered 503 with Retry-After, seconds (0-600; default 30; 0 = refuse at once). "
        "A waiting request holds no records and no thread.",
    )
    catalog_max_names: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Kubernetes execution mode: how many (namespace, application) names the "
        "catalog remembers having read recently, and as many it remembers the API server did "
        "not have (1-1000000; default 10000); the least recently asked ones are forgotten "
        "first.",
    )
    kubeflow_applications: bool = Field(
        default=False,
        description="Kubernetes execution mode: also list the Kubeflow spark-operator's "
        "SparkApplications (sparkoperator.k8s.io/v1beta2) that enable sampling, shown to "
        "callers who may get them (chart value kubeflow.enabled).",
    )
    apache_spark_applications: bool = Field(
        default=False,
        description="Kubernetes execution mode: also list the Apache Spark operator's "
        "SparkApplications (spark.apache.org/v1) that enable sampling, shown to callers who "
        "may get them (chart value apacheSparkOperator.enabled).",
    )
    auth_failure_limit: int = Field(
        default=60,
        ge=1,
        le=1_000_000,
        description="Failed authentications (401) one client address may make per "
        "auth_failure_window_seconds (1-1000000; default 60); beyond it every request of that "
        "address is answered 429 with Retry-After until the budget refills.",
    )
    auth_failure_window_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="The window of auth_failure_limit and auth_failure_token_limit, seconds "
        "(>0-86400; default 60).",
    )
    auth_failure_token_limit: int = Field(
        default=10,
        ge=1,
        le=1_000_000,
        description="Failed authentications one client address may make with one token per "
        "auth_failure_window_seconds (1-1000000; default 10); beyond it that token alone is "
        "answered 429, so a client retrying a bad token does not use up its address's "
        "auth_failure_limit for the other users behind that address.",
    )
    auth_known_token_seconds: float = Field(
        default=900.0,
        ge=0,
        le=86_400,
        description="How long a token that authenticated is let past the failed-"
        "authentication limiter, seconds (0-86400; default 900; 0 = never): users behind a "
        "shared address (an Ingress) keep being served while someone there sends garbage "
        "tokens. It is still authenticated on every request; a 401 forgets it.",
    )
    trusted_proxies: str = Field(
        default="",
        max_length=4096,
        description="Comma-separated addresses or networks (CIDR) of the reverse proxies in "
        "front of the service (e.g. the Ingress controller's Pod network); a request from one "
        "of them is counted by the failed-authentication limiter under the client address in "
        "X-Forwarded-For (the rightmost one not itself a trusted proxy). Default: none, every "
        "request is counted under the address it came from.",
    )
    store_key: SecretStr | None = Field(
        default=None,
        description="Fernet key(s) that encrypt driver control tokens in the store, "
        "comma-separated: the first encrypts, all decrypt (rotation: put the new key first, "
        "keep the old one second until the service has restarted once). Unset: with a SQLite "
        "file store a key is generated once into <database file>.key (mode 0600); with "
        "PostgreSQL registering a driver token is refused until it is set. Generate one with "
        "python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'.",
    )
    docs_enabled: bool = Field(
        default=False,
        description="Serve the Swagger UI at /docs (default off). Its scripts come from a CDN, "
        "so it needs internet access in the browser; /openapi.json is always served.",
    )

    @model_validator(mode="after")
    def _check_modes(self) -> Settings:
        # Local tokens carry no Kubernetes identity: with DataSamples created by the service's
        # cluster-wide account, any local token would read and sample every namespace.
        if self.auth_mode is AuthMode.LOCAL and self.execution_mode is ExecutionMode.KUBERNETES:
            raise ValueError(
                "auth_mode=local cannot be combined with execution_mode=kubernetes: local "
                "tokens would act with the service's cluster-wide account in every namespace; "
                "use auth_mode=kubernetes, or execution_mode=local"
            )
        if self.narrowed_rounds_per_application > self.narrowed_rounds_per_replica:
            raise ValueError(
                f"narrowed_rounds_per_application={self.narrowed_rounds_per_application} is out "
                f"of range: allowed 1 to narrowed_rounds_per_replica "
                f"({self.narrowed_rounds_per_replica})"
            )
        if self.narrowed_rounds_per_replica > max(1, self.round_workers - 1):
            raise ValueError(
                f"narrowed_rounds_per_replica={self.narrowed_rounds_per_replica} is out of "
                f"range: allowed 1 to round_workers - 1 ({max(1, self.round_workers - 1)}), so "
                "that plain rounds always have a thread"
            )
        return self

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: str) -> str:
        # Checked at start-up, naming the setting and the entry that is not an address.
        parse_networks(value, "trusted_proxies")
        return value

    @property
    def result_writer_names(self) -> frozenset[str]:
        """``result_writers`` as a set of names (empty when unset)."""
        return frozenset(w.strip() for w in self.result_writers.split(",") if w.strip())

    @property
    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """``trusted_proxies`` parsed (empty when unset)."""
        return parse_networks(self.trusted_proxies, "trusted_proxies")

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        # Checked at start-up, never echoing the URL (it may hold a password): SQLAlchemy's
        # own parse error quotes it whole.
        from sqlalchemy import make_url
        from sqlalchemy.exc import ArgumentError

        from .store.db import check_store_url

        if value:
            try:
                make_url(value)
            except (ArgumentError, ValueError):  # ValueError: a port that is no number
                raise ValueError(
                    "database_url: not a SQLAlchemy URL (sqlite:///path/to/file.db or "
                    "postgresql+psycopg://user@host/db)"
                ) from None
            check_store_url(value)
        return value

    @field_validator("store_key")
    @classmethod
    def _check_store_key(cls, value: SecretStr | None) -> SecretStr | None:
        # Checked at start-up, naming the setting and never echoing the key.
        if value is not None and value.get_secret_value().strip():
            StoreCipher([k for k in value.get_secret_value().split(",") if k.strip()])
        return value

    @field_validator("sampling_window")
    @classmethod
    def _check_sampling_window(cls, value: str | None) -> str | None:
        # Checked at start-up: a bad window would otherwise fail every round, in the driver
        # (local mode) or at DataSample admission (Kubernetes mode).
        if value is not None:
            _window_ms(value)
        return value

    @property
    def sampling_window_ms(self) -> int | None:
        """``sampling_window`` in milliseconds (1000–30000), or ``None`` when unset."""
        return None if self.sampling_window is None else _window_ms(self.sampling_window)

    @cached_property
    def resolved_database_url(self) -> str:
        """``database_url`` or the SQLite default."""
        return self.database_url or default_database_url()


def parse_networks(text: str, setting: str) -> tuple[IPNetwork, ...]:
    """The comma-separated addresses or CIDR networks in ``text``; ``ValueError`` naming
    ``setting`` and the entry for one that is neither."""
    networks = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"{setting}: {entry[:64]!r} is not an IP address or network (CIDR), e.g. "
                "10.0.0.0/8 or 192.0.2.10"
            ) from None
    return tuple(networks)


def _window_ms(text: str) -> int:
    """Milliseconds in a ``sampling_window``; :class:`SamplingSettingsError` if malformed or
    outside the driver's (and the DataSample CRD's) 1s–30s."""
    field = "sampling_window"
    ms = parse_duration_ms(text, field=field)
    allowed = RANGES["sampling_window_ms"]
    if not allowed.low <= ms <= allowed.high:
        raise SamplingSettingsError(
            f"{field}={format_duration_ms(ms)} is out of range: allowed {allowed.text}",
            field=field,
        )
    return ms
