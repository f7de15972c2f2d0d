"""The Pod Security Standards' ``restricted`` profile (baseline included) as a checker.

Implements the controls as the Kubernetes documentation (concepts/security/pod-security-
standards) lists them, for a Pod manifest or a Pod template (a template has no image):
every container list (``containers``, ``initContainers``, ``ephemeralContainers``) is
checked. :func:`restricted_violations` returns one line per violated control, naming the
field, so a test failure says what would make the admission controller refuse the Pod.
"""

from __future__ import annotations

from typing import Any

#: Baseline: capabilities that may be added (restricted narrows it to NET_BIND_SERVICE).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
#: Restricted: the only volume sources allowed.
RESTRICTED_VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Baseline: the safe sysctls.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
#: Baseline: SELinux types allowed (empty: unset).
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every control of ``restricted`` that ``pod`` (a Pod or Pod template manifest)
    violates, as ``"<field>: <why>"`` lines; empty when the Pod would be admitted."""
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    out: list[str] = []
    psc = spec.get("securityContext") or {}

    # Baseline -----------------------------------------------------------------------
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"spec.{field}: host namespaces are not allowed")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("spec.securityContext.windowsOptions.hostProcess: not allowed")
    for i, v in enumerate(spec.get("volumes") or []):
        sources = set(v) - {"name"}
        if "hostPath" in sources:
            out.append(f"spec.volumes[{i}].hostPath: hostPath volumes are not allowed")
        elif not sources <= RESTRICTED_VOLUME_SOURCES:
            out.append(f"spec.volumes[{i}]: source {sorted(sources)} is not allowed")
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"spec.securityContext.sysctls: {s.get('name')} is not a safe sysctl")
    out += _selinux("spec.securityContext", psc)
    out += _apparmor("spec.securityContext", psc)
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"metadata.annotations[{key}]: AppArmor {value} is not allowed")

    # Restricted, Pod level ------------------------------------------------------------
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append(f"spec.securityContext.seccompProfile.type: {pod_seccomp} is not allowed")
    if psc.get("runAsUser") == 0:
        out.append("spec.securityContext.runAsUser: 0 (root) is not allowed")
    pod_non_root = psc.get("runAsNonRoot")
    if pod_non_root is False:
        out.append("spec.securityContext.runAsNonRoot: must not be false")

    # Every container ------------------------------------------------------------------
    for kind in _CONTAINER_LISTS:
        for i, c in enumerate(spec.get(kind) or []):
            at = f"spec.{kind}[{i}]({c.get('name')})"
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                out.append(f"{at}.securityContext.privileged: not allowed")
            if (sc.get("windowsOptions") or {}).get("hostProcess"):
                out.append(f"{at}.securityContext.windowsOptions.hostProcess: not allowed")
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    out.append(f"{at}.ports: hostPort {p['hostPort']} is not allowed")
            if sc.get("procMount") not in (None, "Default"):
                out.append(f"{at}.securityContext.procMount: {sc['procMount']} not allowed")
            out += _selinux(f"{at}.securityContext", sc)
            out += _apparmor(f"{at}.securityContext", sc)
            caps = sc.get("capabilities") or {}
            for cap in caps.get("add") or []:
                if cap not in RESTRICTED_CAPABILITIES:
                    out.append(f"{at}.securityContext.capabilities.add: {cap} is not allowed")
            if "ALL" not in (caps.get("drop") or []):
                out.append(f"{at}.securityContext.capabilities.drop: must include ALL")
            if sc.get("allowPrivilegeEscalation") is not False:
                out.append(f"{at}.securityContext.allowPrivilegeEscalation: must be false")
            non_root = sc.get("runAsNonRoot")
            if non_root is False or (non_root is None and pod_non_root is not True):
                out.append(f"{at}.securityContext.runAsNonRoot: must be true (here or Pod)")
            if sc.get("runAsUser") == 0:
                out.append(f"{at}.securityContext.runAsUser: 0 (root) is not allowed")
            seccomp = (sc.get("seccompProfile") or {}).get("type")
            if seccomp is None and pod_seccomp is None:
                out.append(f"{at}.securityContext.seccompProfile: must be set (here or Pod)")
            elif seccomp not in (None, "RuntimeDefault", "Localhost"):
                out.append(f"{at}.securityContext.seccompProfile.type: {seccomp} not allowed")
    return out


def _selinux(at: str, sc: dict[str, Any]) -> list[str]:
    se = sc.get("seLinuxOptions") or {}
    out = []
    if se.get("type", "") not in SELINUX_TYPES:
        out.append(f"{at}.seLinuxOptions.type: {se['type']} is not allowed")
    for key in ("user", "role"):
        if se.get(key):
            out.append(f"{at}.seLinuxOptions.{key}: must not be set")
    return out


def _apparmor(at: str, sc: dict[str, Any]) -> list[str]:
    kind = (sc.get("appArmorProfile") or {}).get("type")
    if kind not in (None, "RuntimeDefault", "Localhost"):
        return [f"{at}.appArmorProfile.type: {kind} is not allowed"]
    return []


def restricted(pod_spec: dict[str, Any]) -> dict[str, Any]:
    """``pod_spec`` with the security contexts Pod Security ``restricted`` asks for (what any
    Pod in such a namespace carries): for tests that create Pods of their own."""
    out = dict(pod_spec)
    out["securityContext"] = {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        **(pod_spec.get("securityContext") or {}),
    }
    out["containers"] = [
        {
            **c,
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                **(c.get("securityContext") or {}),
            },
        }
        for c in pod_spec.get("containers") or []
    ]
    return out
