"""Names the operator reads and writes: API coordinates, labels and child object names.

Child objects of a SparkApplication ``<app>``, all owned by it (deleting the application
deletes them through Kubernetes' garbage collector): the ConfigMap ``<app>-sparkglass``
(``pipeline.json``, ``sampling.json``, ``spark-defaults.conf``), the Secret
``<app>-control-token`` (``token``: bearer token of the control endpoint;
``tls.crt``/``tls.key``: its TLS certificate; ``redaction-key``: key of the ``hash``
redaction), the headless Service ``<app>-driver`` (executors reach the driver through it)
and the driver Pod ``<app>-driver`` (``spark-submit --deploy-mode client``).
"""

from __future__ import annotations

import re

from sparkglass.crds.sparkapplication import DRIVER_PORTS
from sparkglass.runtime.contract.redaction import KEY_ENV

GROUP = "sparkglass.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
APPS = "sparkapplications"
SAMPLES = "datasamples"
APP_KIND = "SparkApplication"
SAMPLE_KIND = "DataSample"

#: Labels on child objects and DataSamples (values are DNS-1123 names, valid label values).
LABEL_APP = "sparkglass.io/application"
LABEL_ROLE = "sparkglass.io/role"
LABEL_VERTEX = "sparkglass.io/vertex"
LABEL_PHASE = "sparkglass.io/phase"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "sparkglass-operator"
ROLE_DRIVER = "driver"
ROLE_CONTROL_TOKEN = "control-token"

#: Annotation on the driver Pod: hash of the application spec it runs.
ANNOTATION_SPEC_HASH = "sparkglass.io/spec-hash"

#: Key of the control token in the Secret.
TOKEN_KEY = "token"
#: Key of the ``hash`` redaction's key in the Secret (hex text of 32 random bytes).
REDACTION_KEY_KEY = "redaction-key"

#: Ports of the driver (fixed in the Pod so the headless Service can name them).
DRIVER_PORT = DRIVER_PORTS["driver"]
BLOCK_MANAGER_PORT = DRIVER_PORTS["block-manager"]
UI_PORT = DRIVER_PORTS["spark-ui"]

#: Paths inside the driver container where the ConfigMap is mounted.
CONFIG_DIR = "/etc/sparkglass"
#: Where the control endpoint's certificate and key (from the Secret) are mounted, and the
#: name of that volume (its presence in a driver Pod says the driver serves HTTPS).
CONTROL_TLS_DIR = "/etc/sparkglass-control-tls"
CONTROL_TLS_VOLUME = "sparkglass-control-tls"
#: The driver Pod's ``fsGroup``: the key file is mode 0440, owned by root and this group,
#: which Kubernetes adds to the container's processes, so a non-root driver reads it and
#: nobody else in the container does.
CONTROL_TLS_FS_GROUP = 10001

#: Environment variables the driver container gets (the runtime reads them).
ENV_CONTROL_TOKEN = "SPARKGLASS_CONTROL_TOKEN"
#: The redaction key; the driver's ``spark-submit`` turns it into its conf (``children``).
ENV_REDACTION_KEY = KEY_ENV
ENV_CONTROL_PORT = "SPARKGLASS_CONTROL_PORT"
ENV_PIPELINE_FILE = "SPARKGLASS_PIPELINE_FILE"
ENV_APPLICATION = "SPARKGLASS_APPLICATION"
ENV_NAMESPACE = "SPARKGLASS_NAMESPACE"


#: Longest SparkApplication name: ``<name>-driver`` (the Service) must stay a 63-character
#: DNS-1035 label, and ``<name>-control-token`` a valid Secret name.
MAX_APP_NAME = 56
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def app_name_problem(app: str) -> str | None:
    """Why ``app`` cannot name a SparkApplication's children, or None. The CRD's CEL rule
    refuses such names at admission; this catches objects that bypassed it (an API server
    without CEL, an object restored from a backup)."""
    if len(app) > MAX_APP_NAME or not _DNS_1035.match(app):
        return (
            f"metadata.name {app!r} must be a DNS-1035 label of at most {MAX_APP_NAME} "
            "characters (lower-case letters, digits and '-', starting with a letter): the "
            "driver Service <name>-driver and the label values are made from it"
        )
    return None


def config_map_name(app: str) -> str:
    return f"{app}-sparkglass"


def secret_name(app: str) -> str:
    return f"{app}-control-token"


def service_name(app: str) -> str:
    return f"{app}-driver"


def driver_pod_name(app: str) -> str:
    return f"{app}-driver"
