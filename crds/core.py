"""The Kubernetes ``core/v1`` shapes a SparkApplication embeds: variables, mounts, tolerations,
affinity, security contexts, containers and volumes.

Each is the subset of the upstream type that the CRD checks; the readers keep such an object
as the dict the user wrote (:class:`~sparkglass.crds.fields.AsWritten`), so a field left out
here is not lost: the API server prunes it unless the node keeps unknown fields
(``Container``, ``Volume`` and the affinity terms do, and the API server validates them when
the operator creates the Pod).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from .fields import DNS1123_LABEL_PATTERN, Int32, Int64
from .schema import ResourceModel, Schema

#: An integer or a string (a quantity such as ``500m`` or ``1Gi``), as Kubernetes'
#: IntOrString: the API server takes either, so the node has no type.
IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]
#: A resource quantity (requests, limits).
Quantity = Annotated[IntOrString, Schema(description="A quantity, e.g. 500m or 1Gi.")]
#: An object the API server keeps as written and validates when the Pod is created.
Unchecked = Annotated[dict[str, Any], Schema(x_kubernetes_preserve_unknown_fields=True)]

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
#: The name of an object in the application's namespace (a DNS-1123 subdomain's length).
ObjectName = Annotated[str, Field(max_length=253)]


# ------------------------------------------------------------------------------ variables


class SecretKeySelector(ResourceModel):
    """A key of a Secret in this namespace."""

    name: ObjectName | None = None
    """The Secret's name."""
    key: Annotated[str, Field(max_length=253)]
    """The key."""
    optional: bool | None = None
    """Start even when the Secret or key is missing."""


class ConfigMapKeySelector(ResourceModel):
    """A key of a ConfigMap in this namespace."""

    name: ObjectName | None = None
    """The ConfigMap's name."""
    key: Annotated[str, Field(max_length=253)]
    """The key."""
    optional: bool | None = None
    """Start even when the ConfigMap or key is missing."""


class ObjectFieldSelector(ResourceModel):
    """A field of the Pod (e.g. metadata.name, status.podIP)."""

    api_version: Annotated[str, Field(max_length=64)] | None = None
    """Version of the field path's schema (default v1)."""
    field_path: Annotated[str, Field(max_length=256)]
    """Path of the field."""


class ResourceFieldSelector(ResourceModel):
    """A resource limit or request of a container."""

    container_name: Annotated[str, Field(max_length=63)] | None = None
    """The container (default: this one)."""
    resource: Annotated[str, Field(max_length=64)]
    """The resource, e.g. limits.memory."""
    divisor: IntOrString | None = None
    """Unit the value is divided by (a quantity, default 1)."""


class EnvVarSource(ResourceModel):
    """Where the value comes from (core/v1 EnvVarSource): a Secret or ConfigMap key, a Pod
    field or a container resource."""

    secret_key_ref: SecretKeySelector | None = None
    config_map_key_ref: ConfigMapKeySelector | None = None
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None


class EnvVar(ResourceModel):
    """One environment variable (core/v1 EnvVar)."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    """Variable name."""
    value: str | None = None
    """Variable value."""
    value_from: EnvVarSource | None = None


class ConfigMapEnvSource(ResourceModel):
    """A ConfigMap in this namespace."""

    name: ObjectName | None = None
    """The ConfigMap's name."""
    optional: bool | None = None
    """Start even when it is missing."""


class SecretEnvSource(ResourceModel):
    """A Secret in this namespace."""

    name: ObjectName | None = None
    """The Secret's name."""
    optional: bool | None = None
    """Start even when it is missing."""


class EnvFromSource(ResourceModel):
    """A source of variables (core/v1 EnvFromSource): every key of a ConfigMap or Secret."""

    prefix: Annotated[str, Field(max_length=256)] | None = None
    """Prefix added to every variable name."""
    config_map_ref: ConfigMapEnvSource | None = None
    secret_ref: SecretEnvSource | None = None


# ------------------------------------------------------------------------ mounts, scheduling


class VolumeMount(ResourceModel):
    """One volume mount (core/v1 VolumeMount)."""

    name: Annotated[str, Field(max_length=63)]
    """Name of a volume of spec.volumes."""
    mount_path: Annotated[str, Field(min_length=1, max_length=4096)]
    """Path in the container; not at or under the operator's /etc/sparkglass or
    /etc/sparkglass-control-tls."""
    read_only: bool | None = None
    """Mount read-only."""
    sub_path: Annotated[str, Field(max_length=4096)] | None = None
    """Path inside the volume to mount instead of its root."""
    sub_path_expr: Annotated[str, Field(max_length=4096)] | None = None
    """subPath with $(VAR) expansion from the container's environment."""
    mount_propagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None
    """How mounts propagate between host and container."""
    recursive_read_only: Literal["Disabled", "IfPossible", "Enabled"] | None = None
    """Whether a read-only mount is read-only recursively."""


class Toleration(ResourceModel):
    """One toleration (core/v1 Toleration)."""

    key: Annotated[str, Field(max_length=316)] | None = None
    """Taint key (empty with operator Exists: every taint)."""
    operator: Literal["Exists", "Equal"] | None = None
    """Exists or Equal (default)."""
    value: Annotated[str, Field(max_length=63)] | None = None
    """Taint value (operator Equal)."""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect tolerated (empty: all)."""
    toleration_seconds: Int64 | None = None
    """Seconds a NoExecute taint is tolerated."""


class Affinity(ResourceModel):
    """Scheduling affinity of the Pod (core/v1 Affinity)."""

    node_affinity: Unchecked | None = None
    """Node affinity (core/v1 shape, kept as written and validated by the API server when the
    Pod is created)."""
    pod_affinity: Unchecked | None = None
    """Pod affinity (core/v1 shape, kept as written and validated by the API server when the
    Pod is created)."""
    pod_anti_affinity: Unchecked | None = None
    """Pod anti-affinity (core/v1 shape, kept as written and validated by the API server when
    the Pod is created)."""


# -------------------------------------------------------------------------------- security

ProfileType = Literal["RuntimeDefault", "Localhost", "Unconfined"]
Id = Annotated[Int64, Field(ge=0)]


class _Profile(ResourceModel):
    type: ProfileType
    """Profile type."""
    localhost_profile: Annotated[str, Field(max_length=4096)] | None = None
    """Profile file on the node (type Localhost)."""


class SeccompProfile(_Profile):
    """Seccomp profile (default RuntimeDefault)."""


class AppArmorProfile(_Profile):
    """AppArmor profile."""


class SELinuxOptions(ResourceModel):
    """SELinux context (core/v1 SELinuxOptions)."""

    user: Annotated[str, Field(max_length=256)] | None = None
    """SELinux user."""
    role: Annotated[str, Field(max_length=256)] | None = None
    """SELinux role."""
    type: Annotated[str, Field(max_length=256)] | None = None
    """SELinux type."""
    level: Annotated[str, Field(max_length=256)] | None = None
    """SELinux level."""


class WindowsOptions(ResourceModel):
    """Windows-specific settings (core/v1 WindowsSecurityContextOptions)."""

    gmsa_credential_spec_name: ObjectName | None = None
    """GMSA credential spec name."""
    gmsa_credential_spec: str | None = None
    """GMSA credential spec."""
    run_as_user_name: Annotated[str, Field(max_length=256)] | None = None
    """User name to run as."""
    host_process: bool | None = None
    """Run as a Windows host process (refused by Pod Security baseline)."""


class Sysctl(ResourceModel):
    """One sysctl."""

    name: Annotated[str, Field(max_length=256)]
    """Sysctl name."""
    value: Annotated[str, Field(max_length=1024)]
    """Sysctl value."""


class Capabilities(ResourceModel):
    """Linux capabilities."""

    add: (
        Annotated[
            list[Annotated[str, Field(max_length=64), Schema(description="A capability.")]],
            Field(max_length=32),
        ]
        | None
    ) = None
    """Capabilities added (restricted allows only NET_BIND_SERVICE)."""
    drop: (
        Annotated[
            list[Annotated[str, Field(max_length=64), Schema(description="A capability.")]],
            Field(max_length=64),
        ]
        | None
    ) = None
    """Capabilities dropped (default [ALL])."""


class _ProcessSecurity(ResourceModel):
    # What a Pod's and a container's security contexts share.

    run_as_user: Id | None = None
    """UID to run as (not 0 under Pod Security restricted)."""
    run_as_group: Id | None = None
    """GID to run as."""
    run_as_non_root: bool | None = None
    """Refuse to start as UID 0 (default true)."""
    seccomp_profile: SeccompProfile | None = None
    se_linux_options: SELinuxOptions | None = None
    app_armor_profile: AppArmorProfile | None = None
    windows_options: WindowsOptions | None = None


class PodSecurityContext(_ProcessSecurity):
    """Pod security context (core/v1 PodSecurityContext), merged key by key over the
    restricted defaults runAsNonRoot true and seccompProfile RuntimeDefault."""

    fs_group: Id | None = None
    """Group owning the Pod's volumes and added to its processes (driver default 10001)."""
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    """When volume ownership is changed."""
    supplemental_groups: (
        Annotated[list[Annotated[Id, Schema(description="A GID.")]], Field(max_length=32)] | None
    ) = None
    """Extra GIDs of the Pod's processes."""
    supplemental_groups_policy: Literal["Merge", "Strict"] | None = None
    """How supplemental groups are computed."""
    se_linux_change_policy: Literal["MountOption", "Recursive"] | None = None
    """How the SELinux label is applied to volumes."""
    sysctls: Annotated[list[Sysctl], Field(max_length=16)] | None = None
    """Namespaced sysctls (Pod Security allows only a safe set)."""


class SecurityContext(_ProcessSecurity):
    """Container security context (core/v1 SecurityContext), merged key by key over the
    restricted defaults allowPrivilegeEscalation false and capabilities.drop [ALL]."""

    allow_privilege_escalation: bool | None = None
    """Whether a process may gain more privileges than its parent (default false)."""
    privileged: bool | None = None
    """Run privileged (refused by Pod Security baseline)."""
    read_only_root_filesystem: bool | None = None
    """Mount the root filesystem read-only."""
    proc_mount: Literal["Default", "Unmasked"] | None = None
    """/proc mount type (Pod Security allows only Default)."""
    capabilities: Capabilities | None = None


# ------------------------------------------------------------------------------ containers


class ContainerPort(ResourceModel):
    """One port."""

    name: Annotated[str, Field(max_length=15)] | None = None
    """Port name."""
    container_port: Annotated[Int32, Field(ge=1, le=65535)]
    """Port number."""
    protocol: Literal["TCP", "UDP", "SCTP"] | None = None
    """Protocol."""
    host_port: Annotated[Int32, Field(ge=0, le=65535)] | None = None
    """Port on the node (refused by Pod Security baseline)."""


class ResourceRequirements(ResourceModel):
    """Resource requests and limits."""

    requests: Annotated[dict[str, Quantity], Field(max_length=16)] | None = None
    """Requested resources."""
    limits: Annotated[dict[str, Quantity], Field(max_length=16)] | None = None
    """Resource limits."""


_Argument = Annotated[str, Field(max_length=4096), Schema(description="An argument.")]


class Container(ResourceModel):
    """A core/v1 Container: the fields below are checked here; the others (probes, lifecycle,
    restartPolicy...) are kept as written and validated by the API server when the Pod is
    created. securityContext is merged over the restricted defaults."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": {"x-kubernetes-preserve-unknown-fields": True}
    }

    name: Annotated[str, Field(min_length=1, max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)]
    """Container name (a DNS label), unique in the Pod."""
    image: Annotated[str, Field(max_length=1024)] | None = None
    """Container image."""
    image_pull_policy: PullPolicy | None = None
    """Image pull policy."""
    command: Annotated[list[_Argument], Field(max_length=64)] | None = None
    """Entrypoint."""
    args: Annotated[list[_Argument], Field(max_length=256)] | None = None
    """Arguments."""
    working_dir: Annotated[str, Field(max_length=4096)] | None = None
    """Working directory."""
    env: Annotated[list[EnvVar], Field(max_length=128)] | None = None
    """Environment variables."""
    env_from: Annotated[list[EnvFromSource], Field(max_length=32)] | None = None
    """Sources of environment variables."""
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=64)] | None = None
    """Volume mounts (volumes of spec.volumes)."""
    ports: Annotated[list[ContainerPort], Field(max_length=32)] | None = None
    """Ports the container listens on."""
    resources: ResourceRequirements | None = None
    security_context: SecurityContext | None = None


# --------------------------------------------------------------------------------- volumes


class Volume(ResourceModel):
    """One volume (core/v1 Volume). The sources listed are those Pod Security restricted
    allows; others (hostPath, nfs...) are kept as written and validated by the API server when
    the Pod is created."""

    model_config = ResourceModel.model_config | {
        "json_schema_extra": {"x-kubernetes-preserve-unknown-fields": True}
    }

    name: Annotated[str, Field(min_length=1, max_length=63), Schema(pattern=DNS1123_LABEL_PATTERN)]
    """Volume name, unique; not sparkglass-config, sparkglass-control-tls or spark-local-dir-*
    / spark-conf-volume*."""
    config_map: Unchecked | None = None
    """A configMap source (core/v1 shape)."""
    secret: Unchecked | None = None
    """A secret source (core/v1 shape)."""
    empty_dir: Unchecked | None = None
    """A emptyDir source (core/v1 shape)."""
    persistent_volume_claim: Unchecked | None = None
    """A persistentVolumeClaim source (core/v1 shape)."""
    projected: Unchecked | None = None
    """A projected source (core/v1 shape)."""
    downward_api: Unchecked | None = Field(default=None, alias="downwardAPI")
    """A downwardAPI source (core/v1 shape)."""
    csi: Unchecked | None = None
    """A csi source (core/v1 shape)."""
    ephemeral: Unchecked | None = None
    """A ephemeral source (core/v1 shape)."""
