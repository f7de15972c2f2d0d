# One image for everything sparkglass runs on Kubernetes:
#   - the operator        (Helm chart: `sparkglass operator run ...`)
#   - the REST service     (Helm chart: `sparkglass serve`)
#   - Spark drivers        (the operator's driver Pod: `spark-submit --deploy-mode client ...`)
#   - Spark executors      (created by the driver with the single argument `executor`)
# Spark comes from the pyspark wheel on a Java 17 runtime; the JVM half of the tap (the
# sampling plugin jar) is compiled from runtime/jvm in the build stage, never committed.
#
#   docker build -t ghcr.io/sparkglass/sparkglass:0.1.0 .
#   make image        # the same file with buildah, no Docker engine and no registry needed
#                     # (a Debian bookworm base made by mmdebstrap; see e2e/README.md)
#
# Plain Debian bookworm on both stages, Python and Java from Debian's packages: the venv built
# in the first stage points at /usr/bin/python3.11, which the second stage installs from the
# same release, and bookworm ships OpenJDK 17. BASE_IMAGE is any bookworm root filesystem:
# the official debian image, or `make image`'s own made from Debian's mirrors.
# Classic Dockerfile syntax only (no heredocs), so that both builders read it alike.

ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

# ---------------------------------------------------------------------------------------------
# Build stage: the venv with sparkglass and its dependencies, and the plugin jar (needs javac).
FROM ${BASE_IMAGE} AS build

# Debian packages are not pinned (DL3008): bookworm's security updates replace old versions,
# so a pin would break the build; the base image tag pins the release. python3.11-venv brings
# ensurepip (the venv's pip); ca-certificates lets pip verify PyPI.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3.11 python3.11-venv ca-certificates openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/sparkglass/venv \
    PATH=/opt/sparkglass/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3.11 -m venv "$VIRTUAL_ENV"

WORKDIR /src
# pyproject.toml maps the top-level folders to sparkglass.{runtime,service,operator,crds};
# src/sparkglass/{runtime,service,operator,crds} are symlinks to them (COPY keeps symlinks).
COPY pyproject.toml README.md ./
COPY src/ src/
COPY runtime/ runtime/
COPY service/ service/
COPY operator/ operator/
COPY crds/ crds/
COPY build_support/ build_support/
# A regular (not editable) install: the image must not depend on /src. `[all]`: the image runs
# the operator, the service, Spark drivers and executors, and the flights job (the demo's
# data), so it holds the runtime and every extra but `pipelines` (README.md, "Install").
# SPARKGLASS_BUILD_JAR=0: the wheel's own prebuilt jar would add a second pyspark download to
# the build environment; the image compiles the jar once, below, at the path the chart names.
RUN SPARKGLASS_BUILD_JAR=0 pip install "./[all]" \
 && sparkglass --version

# The tap's JVM half, compiled with javac against the installed pyspark's own jars. The chart
# passes this path to the operator (--runtime-jar local:///opt/sparkglass/sparkglass-tap.jar),
# which puts it in every driver's spark.jars and spark.plugins.
# chmod: the jar is written through a private temporary file (mode 0600, owner root), and the
# image runs as user 10001, whose drivers must read it (found by running the built image).
RUN sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar \
 && chmod 0644 /opt/sparkglass/sparkglass-tap.jar

# ---------------------------------------------------------------------------------------------
# Runtime stage: Python and a JRE only (no compiler, no pip cache), tini as PID 1, a fixed
# non-root user (numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd).
FROM ${BASE_IMAGE} AS runtime

# procps: Spark's launch scripts call `ps`. tini: reaps the JVM's and Python workers' children
# and forwards SIGTERM, so Pods stop promptly.
# /opt/java: an architecture-independent JAVA_HOME (the Debian path names the CPU).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3.11 openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
 && groupadd --gid 10001 sparkglass \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin sparkglass

COPY --from=build /opt/sparkglass /opt/sparkglass
# The demo job the example SparkApplication runs (examples/flights-sparkapplication.yaml:
# mainApplicationFile local:///opt/sparkglass/examples/...).
COPY examples/ /opt/sparkglass/examples/

# SPARK_HOME is the pyspark package (it holds bin/, jars/ and the launch scripts); /opt/spark
# points there so Spark-on-Kubernetes conventions and executor classpaths stay short.
RUN ln -s "$(/opt/sparkglass/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
 && ls /opt/spark/jars/spark-core_*.jar >/dev/null

# The image entrypoint: Spark's executor/driver protocol, else the sparkglass CLI. A file (not a
# heredoc) so that builders without heredoc support (buildah before 1.33, `make image`) build
# the same Dockerfile; git keeps its mode 0755.
COPY image/entrypoint.sh /opt/sparkglass/entrypoint.sh

# HOME and the jar cache live under /tmp (an emptyDir in the chart): the root filesystem is
# read-only there.
ENV PATH=/opt/sparkglass/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/sparkglass/venv \
    JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/opt/sparkglass/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/sparkglass/venv/bin/python \
    SPARKGLASS_TAP_JAR=/opt/sparkglass/sparkglass-tap.jar \
    HOME=/tmp \
    SPARKGLASS_JAR_CACHE=/tmp/sparkglass-jars \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The same numeric user the chart's securityContext runs as (runAsUser: 10001).
USER 10001:10001
WORKDIR /tmp

ENTRYPOINT ["/usr/bin/tini", "--", "/opt/sparkglass/entrypoint.sh"]
CMD ["--help"]
