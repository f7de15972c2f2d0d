"""The Kubernetes API client the service uses (auth reviews, DataSamples, SparkApplications).

Configuration order: ``settings.kube_api_url`` (+ ``kube_token``, ``kube_insecure``; what
tests use against an emulator on loopback), else the in-cluster service account, else the
local kubeconfig.
"""

from __future__ import annotations

from kubernetes import client, config

from .settings import Settings


def make_api_client(settings: Settings) -> client.ApiClient:
    """A configured :class:`kubernetes.client.ApiClient` (thread-safe for our sync use)."""
    if settings.kube_api_url:
        cfg = client.Configuration()
        cfg.host = settings.kube_api_url.rstrip("/")
        cfg.verify_ssl = not settings.kube_insecure
        if settings.kube_token:
            cfg.api_key = {"authorization": settings.kube_token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.ApiClient()
