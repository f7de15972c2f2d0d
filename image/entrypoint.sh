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
