# syntax=docker/dockerfile:1.7
# One image for everything sparkglass runs on Kubernetes:
#   - the operator        (Helm chart: `sparkglass operator run ...`)
#   - the REST service     (Helm chart: `sparkglass serve`)
#   - Spark drivers        (the operator's driver Pod: `spark-submit --deploy-mode client ...`)
#   - Spark executors      (created by the driver with the single argument `executor`)
# Spark comes from the pyspark wheel on a Java 17 runtime; the JVM half of the tap (the
# sampling plugin jar) is compiled from runtime/jvm in the build stage, never committed.
#
#   docker build -t ghcr.io/sparkglass/sparkglass:0.1.0 .
#
# Debian bookworm on both stages: the venv built in the first stage points at the same
# /usr/local/bin/python3.11 in the second, and bookworm ships OpenJDK 17.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------------------
# Build stage: the venv with sparkglass and its dependencies, and the plugin jar (needs javac).
FROM ${PYTHON_IMAGE} AS build

# Debian packages are not pinned (DL3008): bookworm's security updates replace old versions,
# so a pin would break the build; the base image tag pins the release.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jdk-headless \
 && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/sparkglass/venv \
    PATH=/opt/sparkglass/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv "$VIRTUAL_ENV"

WORKDIR /src
# pyproject.toml maps the top-level folders to sparkglass.{runtime,service,operator};
# src/sparkglass/{runtime,service,operator} are symlinks to them (COPY keeps symlinks).
COPY pyproject.toml README.md ./
COPY src/ src/
COPY runtime/ runtime/
COPY service/ service/
COPY operator/ operator/
# A regular (not editable) install: the image must not depend on /src.
RUN pip install . \
 && sparkglass --version

# The tap's JVM half, compiled with javac against the installed pyspark's own jars. The chart
# passes this path to the operator (--runtime-jar local:///opt/sparkglass/sparkglass-tap.jar),
# which puts it in every driver's spark.jars and spark.plugins.
RUN sparkglass jar build -o /opt/sparkglass/sparkglass-tap.jar

# ---------------------------------------------------------------------------------------------
# Runtime stage: JRE only (no compiler), tini as PID 1, a fixed non-root user.
FROM ${PYTHON_IMAGE} AS runtime

# procps: Spark's launch scripts call `ps`. tini: reaps the JVM's and Python workers' children
# and forwards SIGTERM, so Pods stop promptly.
# /opt/java: an architecture-independent JAVA_HOME (the Debian path names the CPU).
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless procps tini \
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

# The image entrypoint: Spark's executor/driver protocol, else the sparkglass CLI.
COPY --chmod=0755 <<'EOF' /opt/sparkglass/entrypoint.sh
#!/bin/bash
# sparkglass image entrypoint.
#   executor ...   Spark on Kubernetes starts executor Pods with this single argument and passes
#                  everything else in SPARK_* environment variables (as in Spark's own image).
#   driver ...     cluster-mode drivers started by spark-submit --deploy-mode cluster.
#   spark-submit, spark-class, pyspark, python, python3, bash, sh, or an absolute path: run as is.
#   anything else: arguments of the `sparkglass` CLI (operator run, serve, jar build, demo...).
# No file is written here: the root filesystem may be read-only.
set -euo pipefail

case "${1:-}" in
  executor)
    shift
    # SPARK_JAVA_OPT_<n> variables carry the executor's JVM options, in order of <n>.
    readarray -t java_opts < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$SPARK_HOME/jars/*"
    if [ -n "${SPARK_CLASSPATH:-}" ]; then classpath="$SPARK_CLASSPATH:$classpath"; fi
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="$classpath:$SPARK_EXTRA_CLASSPATH"; fi
    exec "$JAVA_HOME/bin/java" "${java_opts[@]}" \
      -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
      --podName "$SPARK_EXECUTOR_POD_NAME"
    ;;
  driver)
    shift
    exec spark-submit --conf "spark.driver.bindAddress=${SPARK_DRIVER_BIND_ADDRESS:-0.0.0.0}" \
      --deploy-mode client "$@"
    ;;
  spark-submit|spark-class|pyspark|python|python3|bash|sh|/*)
    exec "$@"
    ;;
  *)
    exec sparkglass "$@"
    ;;
esac
EOF

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
