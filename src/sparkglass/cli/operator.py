"""``sparkglass operator``: run the Kubernetes operator, or print its CRDs."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import typer

from sparkglass.runtime.contract.datasample_status import (
    DEFAULT_STATUS_BYTES,
    MAX_STATUS_BYTES,
)

from . import urls

operator_app = typer.Typer(
    name="operator",
    help=(
        "The Kubernetes operator: reconciles SparkApplication (runs the Spark job) and "
        "DataSample (runs one sampling round) custom resources (sparkglass.io/v1alpha1).\n\n"
        "Example: `sparkglass operator crds | kubectl apply -f -` then "
        "`sparkglass operator run --namespace spark-jobs`"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

#: The CRDs shipped with the source tree (the chart ships the same files).
#: The CRDs, shipped as package data (src/sparkglass/crds links to the top-level crds/).
CRD_DIR = Path(str(importlib.resources.files("sparkglass") / "crds"))

#: The variable ``--allowed-service-account`` is read from (the chart sets it from
#: ``operator.allowedServiceAccounts``). Spelled out rather than imported from
#: ``sparkglass.operator.pod_privileges`` (its ``ALLOWED_SERVICE_ACCOUNTS_ENV``, which a test
#: keeps equal) so that ``sparkglass --help`` does not import the operator.
ALLOWED_SERVICE_ACCOUNTS_ENV = "SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS"
ALLOWED_SERVICE_ACCOUNT_OPTION = "--allowed-service-account"


def _allowed_service_accounts(values: list[str]) -> list[str]:
    """The allowlist from the repeated option or the variable, each value comma-separated
    too (click splits a variable for a repeatable option at whitespace: "a, b" and "a,b"
    both arrive here), names checked and duplicates dropped. A bad name is a usage error;
    click's message already names the option and its variable, so the name's own prefix is
    left out."""
    from sparkglass.operator.pod_privileges import parse_service_accounts

    try:
        return list(parse_service_accounts(",".join(values), setting="_"))
    except ValueError as exc:
        raise typer.BadParameter(str(exc).removeprefix("_: ")) from None


def register(app: typer.Typer) -> None:
    """Add the ``operator`` command group to ``app``."""
    app.add_typer(operator_app, name="operator")


@operator_app.command(
    "run",
    help=(
        "Run the operator against the cluster of the current kubeconfig (or in-cluster "
        "credentials). Watches the given namespaces, or all with --all-namespaces. "
        "Replicas elect a leader on a coordination.k8s.io Lease (--lease-name in "
        "--lease-namespace): only the leader acts, another takes over within the lease "
        "duration when it dies. --standalone: no election (one replica).\n\n"
        "Example: `sparkglass operator run --namespace spark-jobs --metrics-port 9090 "
        "--allowed-service-account spark-driver`"
    ),
)
def run(
    namespace: list[str] = typer.Option(
        [], "--namespace", "-n", help="Namespace to watch (repeatable; globs allowed)."
    ),
    all_namespaces: bool = typer.Option(
        False, "--all-namespaces", "-A", help="Watch every namespace (cluster-wide)."
    ),
    standalone: bool = typer.Option(
        False, "--standalone", help="No leader election: this is the only replica."
    ),
    lease_name: str = typer.Option(
        "sparkglass-operator", "--lease-name", help="The Lease the replicas compete for."
    ),
    lease_namespace: str = typer.Option(
        "",
        "--lease-namespace",
        envvar="POD_NAMESPACE",
        help="Namespace of the Lease (default: the only --namespace given).",
    ),
    lease_duration: float = typer.Option(
        15.0, "--lease-duration-seconds", min=1, max=300, help="How long a Lease holds unrenewed."
    ),
    renew_deadline: float = typer.Option(
        10.0,
        "--lease-renew-deadline-seconds",
        min=0.5,
        max=300,
        help="A leader unable to renew this long stops (less than the duration).",
    ),
    retry_period: float = typer.Option(
        2.0,
        "--lease-retry-period-seconds",
        min=0.1,
        max=60,
        help="Seconds between renewals and between a candidate's looks.",
    ),
    health_port: int = typer.Option(
        8080, "--health-port", min=0, max=65535, help="Liveness port (/healthz); 0: off."
    ),
    metrics_port: int = typer.Option(
        9090, "--metrics-port", min=0, max=65535, help="Prometheus metrics port; 0: off."
    ),
    bind: str = typer.Option("0.0.0.0", "--bind", help="Address of the health and metrics ports."),
    webhook_port: int = typer.Option(
        0,
        "--webhook-port",
        min=0,
        max=65535,
        envvar="SPARKGLASS_WEBHOOK_PORT",
        help=(
            "HTTPS port of the DataSample admission webhook (every replica serves it; the "
            "chart's ValidatingWebhookConfiguration calls it): refuses at kubectl apply a "
            "filter that does not parse, an unknown column or expectation, naming the field. "
            "0: off. Needs --webhook-cert-file and --webhook-key-file."
        ),
    ),
    webhook_cert_file: str = typer.Option(
        "",
        "--webhook-cert-file",
        envvar="SPARKGLASS_WEBHOOK_CERT_FILE",
        help="PEM certificate the webhook serves (read again when the file changes).",
    ),
    webhook_key_file: str = typer.Option(
        "",
        "--webhook-key-file",
        envvar="SPARKGLASS_WEBHOOK_KEY_FILE",
        help="PEM private key of --webhook-cert-file.",
    ),
    resync: float = typer.Option(
        10.0, "--resync-seconds", min=0.2, max=3600, help="SparkApplication resync interval."
    ),
    full_resync: float = typer.Option(
        300.0,
        "--full-resync-seconds",
        min=0,
        max=86400,
        envvar="SPARKGLASS_FULL_RESYNC_SECONDS",
        help=(
            "How often a live SparkApplication's resync reads it and its children from the "
            "API again (0-86400). In between, resyncs decide from the operator's watches "
            "(driver and executor Pods, ConfigMaps and Services it created), at no API "
            "request; 0: every resync reads everything. These reads take at most half of "
            "--api-qps, after any work someone waits on."
        ),
    ),
    api_qps: float = typer.Option(
        20.0,
        "--api-qps",
        min=1,
        max=1000,
        envvar="SPARKGLASS_API_QPS",
        help="Most Kubernetes API requests the operator starts per second (1-1000), as "
        "client-go's QPS: its flow stays inside its API Priority and Fairness share. "
        "Leader-election renewals are not counted.",
    ),
    api_burst: int = typer.Option(
        40,
        "--api-burst",
        min=1,
        max=5000,
        envvar="SPARKGLASS_API_BURST",
        help="Most Kubernetes API requests the operator starts at once (1-5000), as "
        "client-go's Burst: a bucket of this many tokens, refilled at --api-qps per second, "
        "so a burst (a relist, many applications created together) goes out at once and the "
        "rest at --api-qps.",
    ),
    progress: float = typer.Option(
        60.0,  # operator/settings.py's DEFAULT_PROGRESS_SECONDS (a test keeps them equal)
        "--progress-seconds",
        min=0,
        max=3600,
        help=(
            "How often a running driver's live metrics are read and, when they changed, "
            "copied into its SparkApplication's status.progress (the page's graph in "
            "Kubernetes mode, which is up to this long plus one resync behind); each copy is "
            "one status write. 0: never."
        ),
    ),
    publish_foreign_pipelines: bool = typer.Option(
        False,
        "--publish-foreign-pipelines",
        help=(
            "Ask the verified driver of each running Kubeflow / Apache Spark operator "
            "application for its pipeline (once per driver Pod) and publish it in the "
            "ConfigMap <app>-sparkglass-pipeline, for the service to list its vertices."
        ),
    ),
    poll: float = typer.Option(
        1.0, "--poll-seconds", min=0.1, max=60, help="DataSample step interval."
    ),
    max_status_bytes: int = typer.Option(
        DEFAULT_STATUS_BYTES,
        "--max-status-bytes",
        min=1024,
        max=MAX_STATUS_BYTES,
        help="Most bytes of records a DataSample status holds (the rest is in the service).",
    ),
    records_in_status: bool | None = typer.Option(
        None,
        "--records-in-status/--no-records-in-status",
        show_default=False,
        help=(
            "Write sampled records into DataSample status (etcd), at most --max-status-bytes. "
            "Default: off when results go to the service (--service-url), which serves them "
            "at status.resultsURL; on without a service, where the status is all there is."
        ),
    ),
    default_ttl: int = typer.Option(
        3600,
        "--default-ttl-seconds-after-finished",
        min=0,
        max=31536000,
        help="Seconds a finished DataSample is kept when its spec sets no "
        "ttlSecondsAfterFinished (0-31536000).",
    ),
    allowed_service_accounts: list[str] = typer.Option(
        [],
        ALLOWED_SERVICE_ACCOUNT_OPTION,
        envvar=ALLOWED_SERVICE_ACCOUNTS_ENV,
        callback=_allowed_service_accounts,
        help=(
            "A ServiceAccount that SparkApplication drivers and executors may run as "
            "(security A1: the operator creates their Pods with its own rights, so without "
            "this list whoever may create a SparkApplication could run it as any account of "
            "the namespace, the operator's own included). Repeatable, or comma-separated; "
            "spec.driver/executor.serviceAccount must be one of them, the namespace's "
            "'default' or unset. Default: spark-driver (the chart's driver account). "
            "Example: --allowed-service-account spark-driver --allowed-service-account "
            "etl-runner, or SPARKGLASS_ALLOWED_SERVICE_ACCOUNTS=spark-driver,etl-runner."
        ),
    ),
    allow_cleartext_control: bool = typer.Option(
        False,
        "--allow-cleartext-control/--no-allow-cleartext-control",
        help=(
            "Send the control token over plain HTTP to drivers started without TLS (by an "
            "older operator). Off: their DataSamples fail until the application restarts."
        ),
    ),
    service_url: str = typer.Option(
        "",
        "--service-url",
        envvar="SPARKGLASS_SERVICE_URL",
        callback=urls.http_url,
        help="Base URL of the sparkglass service (for status.resultsURL).",
    ),
    service_internal_url: str = typer.Option(
        "",
        "--service-internal-url",
        envvar="SPARKGLASS_SERVICE_INTERNAL_URL",
        callback=urls.http_url,
        help=(
            "The service's address inside the cluster, where the operator saves each "
            "DataSample's full result (PUT .../datasamples/{name}/result). Default: "
            "--service-url. Example: http://sparkglass-service.sparkglass-system.svc:8080"
        ),
    ),
    service_token_file: str = typer.Option(
        "",
        "--service-token-file",
        envvar="SPARKGLASS_SERVICE_TOKEN_FILE",
        help=(
            "File of the bearer token the operator saves results with, read at each call. "
            "Default: where the chart mounts a projected ServiceAccount token of the "
            "service's audience (/var/run/secrets/sparkglass/service/token)."
        ),
    ),
    service_ca_file: str = typer.Option(
        "",
        "--service-ca-file",
        envvar="SPARKGLASS_SERVICE_CA_FILE",
        help="CA bundle that signs the service's certificate, for an https internal URL.",
    ),
    kubernetes_master: str = typer.Option(
        "k8s://https://kubernetes.default.svc",
        "--kubernetes-master",
        callback=urls.kubernetes_master,
        help="Spark master URL the drivers use to create executors.",
    ),
    runtime_jar: str = typer.Option(
        "local:///opt/sparkglass/sparkglass-tap.jar",
        "--runtime-jar",
        help="The sparkglass plugin jar inside the image (built by `sparkglass jar build`).",
    ),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
    log_format: str = typer.Option("json", "--log-format", help="json or console."),
) -> None:
    from sparkglass.operator.app import run as run_operator
    from sparkglass.operator.kube.leader_election import ElectionConfig
    from sparkglass.operator.logs import configure_logging
    from sparkglass.operator.pod_privileges import DEFAULT_ALLOWED_SERVICE_ACCOUNTS
    from sparkglass.operator.results import DEFAULT_TOKEN_FILE as DEFAULT_SERVICE_TOKEN_FILE
    from sparkglass.operator.settings import OperatorConfig, WebhookConfig
    from sparkglass.operator.spark_conf import DriverEnvironment

    from . import fail

    if all_namespaces and namespace:
        raise fail("give --namespace or --all-namespaces, not both")
    if not all_namespaces and not namespace:
        raise fail("give --namespace NAME (repeatable) or --all-namespaces")
    if log_format not in ("json", "console"):
        raise fail(f"--log-format must be json or console, not {log_format!r}")
    configure_logging(log_level, json_format=log_format == "json")
    election = None
    if not standalone:
        lease_ns = lease_namespace or (namespace[0] if len(namespace) == 1 else "")
        if not lease_ns or any(set("*?[!") & set(lease_ns)):
            raise fail(
                "give --lease-namespace (or POD_NAMESPACE) for the leader election Lease, "
                "or --standalone for a single replica"
            )
        try:
            election = ElectionConfig(
                namespace=lease_ns,
                name=lease_name,
                lease_duration=lease_duration,
                renew_deadline=renew_deadline,
                retry_period=retry_period,
            )
        except ValueError as exc:
            raise fail(str(exc)) from None
    webhook = None
    if webhook_port:
        if not webhook_cert_file or not webhook_key_file:
            raise fail(
                "--webhook-port needs --webhook-cert-file and --webhook-key-file "
                "(the API server calls admission webhooks over HTTPS only)"
            )
        for option, path in (
            ("--webhook-cert-file", webhook_cert_file),
            ("--webhook-key-file", webhook_key_file),
        ):
            if not Path(path).is_file():
                raise fail(f"{option}: no such file: {path}")
        webhook = WebhookConfig(
            cert_file=webhook_cert_file, key_file=webhook_key_file, port=webhook_port, address=bind
        )
    if records_in_status is False and not (service_url or service_internal_url):
        raise fail(
            "--no-records-in-status needs --service-url or --service-internal-url: without a "
            "service, a DataSample's status is the only place its records can go"
        )
    config = OperatorConfig(
        namespaces=tuple(namespace),
        webhook=webhook,
        standalone=standalone,
        election=election,
        liveness_endpoint=f"http://{bind}:{health_port}/healthz" if health_port else None,
        metrics_port=metrics_port or None,
        metrics_address=bind,
        resync_seconds=resync,
        full_resync_seconds=full_resync,
        api_qps=api_qps,
        api_burst=api_burst,
        progress_seconds=progress,
        publish_foreign_pipelines=publish_foreign_pipelines,
        poll_seconds=poll,
        max_status_bytes=max_status_bytes,
        records_in_status=records_in_status,
        default_ttl_seconds_after_finished=default_ttl,
        allow_cleartext_control=allow_cleartext_control,
        # None given (or an empty variable) means the default: an operator accepting no
        # account at all would refuse every application that names one.
        allowed_service_accounts=(
            tuple(allowed_service_accounts) or DEFAULT_ALLOWED_SERVICE_ACCOUNTS
        ),
        service_url=service_url or None,
        service_internal_url=service_internal_url or None,
        service_token_file=service_token_file or DEFAULT_SERVICE_TOKEN_FILE,
        service_ca_file=service_ca_file or None,
        driver=DriverEnvironment(kubernetes_master=kubernetes_master, runtime_jar=runtime_jar),
    )
    run_operator(config)


@operator_app.command(
    "crds",
    help=(
        "Print the CustomResourceDefinitions (SparkApplication, DataSample) as "
        "one YAML stream.\n\nExample: `sparkglass operator crds | kubectl apply -f -`"
    ),
)
def crds() -> None:
    from . import fail

    files = sorted(CRD_DIR.glob("*.yaml")) if CRD_DIR.is_dir() else []
    if not files:
        raise fail(f"no CRDs found in {CRD_DIR} (this command needs the source tree)")
    typer.echo("---\n".join(f.read_text() for f in files), nl=False)
