#!/usr/bin/env bash
# The release check: sparkglass on a real Kubernetes cluster (kind), from the project's image.
#
#   e2e/kind/kind-e2e.sh all        # up + crds + load + install + the pytest suite (+ down)
#   e2e/kind/kind-e2e.sh up         # a kind cluster, its kubeconfig in $SPARKGLASS_KIND_WORK
#   e2e/kind/kind-e2e.sh crds       # the generated CRDs applied (the API server's checks,
#                                   # CEL cost included, which no test here can make)
#   e2e/kind/kind-e2e.sh load       # the image into the cluster's nodes
#   e2e/kind/kind-e2e.sh install    # the namespace for jobs and the Helm chart, waited for
#   e2e/kind/kind-e2e.sh down       # delete the cluster
#   e2e/kind/kind-e2e.sh kubeconfig # print the kubeconfig path
#
# Needs: a Docker engine (kind's nodes are containers), kind, kubectl and helm on PATH
# (or $KUBECTL / $HELM). The pytest suite (e2e/kind/test_kind.py) calls the same subcommands,
# so running it alone does everything too; the suite is skipped where these are missing.
#
# Environment (all optional):
#   SPARKGLASS_KIND_CLUSTER        cluster name (sparkglass-e2e)
#   SPARKGLASS_KIND_WORK           kubeconfig and logs (/tmp/sparkglass-kind)
#   SPARKGLASS_IMAGE               image reference (localhost/sparkglass:dev, what `make image` tags)
#   SPARKGLASS_IMAGE_ARCHIVE       a docker-archive of the image (`make image-archive`): loaded
#                                  with `kind load image-archive` instead of from the engine
#   SPARKGLASS_KIND_BUILD=1        `docker build` the image first when the engine lacks it
#   SPARKGLASS_KIND_NAMESPACE      namespace of the SparkApplications (spark-jobs)
#   SPARKGLASS_KIND_POD_SECURITY   Pod Security level enforced there (restricted)
#   SPARKGLASS_KIND_KEEP=1         `all` keeps the cluster at the end
#   SPARKGLASS_KIND_NODE_IMAGE     kind node image (kind's default when empty)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER="${SPARKGLASS_KIND_CLUSTER:-sparkglass-e2e}"
WORK="${SPARKGLASS_KIND_WORK:-/tmp/sparkglass-kind}"
IMAGE="${SPARKGLASS_IMAGE:-localhost/sparkglass:dev}"
ARCHIVE="${SPARKGLASS_IMAGE_ARCHIVE:-}"
NAMESPACE="${SPARKGLASS_KIND_NAMESPACE:-spark-jobs}"
POD_SECURITY="${SPARKGLASS_KIND_POD_SECURITY:-restricted}"
RELEASE=sparkglass
RELEASE_NAMESPACE=sparkglass
KUBECONFIG_FILE="$WORK/kubeconfig"
KUBECTL="${KUBECTL:-kubectl}"
HELM="${HELM:-helm}"

log() { printf '[kind-e2e] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

need() {
  local missing=()
  command -v docker >/dev/null || missing+=(docker)
  command -v kind >/dev/null || missing+=(kind)
  command -v "$KUBECTL" >/dev/null || missing+=(kubectl)
  command -v "$HELM" >/dev/null || missing+=(helm)
  [ ${#missing[@]} -eq 0 ] || die "not on PATH: ${missing[*]}"
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
}

k() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# repository[:tag] -> "repository tag" (a registry port is not a tag: localhost:5000/x).
split_image() {
  local ref="$1" last="${1##*/}"
  if [[ "$last" == *:* ]]; then
    echo "${ref%:*} ${ref##*:}"
  else
    echo "$ref latest"
  fi
}

cmd_up() {
  need
  mkdir -p "$WORK"
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "cluster $CLUSTER exists"
  else
    log "creating cluster $CLUSTER"
    # --kubeconfig: the user's own ~/.kube/config is left alone.
    local args=(create cluster --name "$CLUSTER" --wait 180s --kubeconfig "$KUBECONFIG_FILE")
    [ -z "${SPARKGLASS_KIND_NODE_IMAGE:-}" ] || args+=(--image "$SPARKGLASS_KIND_NODE_IMAGE")
    kind "${args[@]}"
  fi
  kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
  k wait --for=condition=Ready nodes --all --timeout=180s
}

cmd_crds() {
  need
  # First a server-side dry run: the API server validates each CRD (structural schema, the
  # estimated cost of every CEL rule) and stores nothing. Then the real apply, server-side so
  # that no last-applied-configuration annotation copies the CRD (kubectl's client-side
  # apply would, and a CRD past 256 KiB would be refused for it).
  log "applying the generated CRDs (dry run, then for real)"
  k apply --server-side --dry-run=server -f "$REPO/crds/"
  k apply --server-side -f "$REPO/crds/"
  k wait --for=condition=Established crd/sparkapplications.sparkglass.io \
    crd/datasamples.sparkglass.io --timeout=60s
}

cmd_load() {
  need
  if [ -n "$ARCHIVE" ]; then
    [ -f "$ARCHIVE" ] || die "SPARKGLASS_IMAGE_ARCHIVE=$ARCHIVE: no such file"
    log "loading $ARCHIVE into $CLUSTER"
    kind load image-archive "$ARCHIVE" --name "$CLUSTER"
    return
  fi
  if ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
    [ "${SPARKGLASS_KIND_BUILD:-}" = 1 ] \
      || die "the engine has no image $IMAGE: build it (docker build -t $IMAGE .), set SPARKGLASS_KIND_BUILD=1, or give SPARKGLASS_IMAGE_ARCHIVE (make image-archive)"
    log "building $IMAGE with docker"
    docker build -t "$IMAGE" "$REPO"
  fi
  log "loading $IMAGE into $CLUSTER"
  kind load docker-image "$IMAGE" --name "$CLUSTER"
}

cmd_install() {
  need
  local repo tag
  read -r repo tag <<<"$(split_image "$IMAGE")"
  # The jobs' namespace enforces Pod Security: the operator's driver Pods and the executor
  # Pods Spark creates must pass it, or they are refused at admission.
  k create namespace "$NAMESPACE" --dry-run=client -o yaml | k apply -f -
  k label namespace "$NAMESPACE" --overwrite \
    "pod-security.kubernetes.io/enforce=$POD_SECURITY" \
    "pod-security.kubernetes.io/warn=$POD_SECURITY"
  k create namespace "$RELEASE_NAMESPACE" --dry-run=client -o yaml | k apply -f -
  k label namespace "$RELEASE_NAMESPACE" --overwrite \
    "pod-security.kubernetes.io/enforce=restricted"
  log "installing the chart ($repo:$tag) into $RELEASE_NAMESPACE, watching $NAMESPACE"
  # pullPolicy Never: the image exists only on the nodes (kind load), never in a registry.
  "$HELM" --kubeconfig "$KUBECONFIG_FILE" upgrade --install "$RELEASE" "$REPO/charts/sparkglass" \
    --namespace "$RELEASE_NAMESPACE" \
    --set image.repository="$repo" --set image.tag="$tag" --set image.pullPolicy=Never \
    --set "watchNamespaces={$NAMESPACE}" \
    --set store.sqlite.persistence.enabled=false \
    --set networkPolicy.webhookFromAnywhere=true \
    --wait --timeout 5m
  k -n "$RELEASE_NAMESPACE" wait --for=condition=Available deployment --all --timeout=180s
}

cmd_down() {
  command -v kind >/dev/null || die "kind is not on PATH"
  kind delete cluster --name "$CLUSTER"
}

cmd_all() {
  cmd_up
  cmd_crds
  cmd_load
  cmd_install
  local rc=0
  SPARKGLASS_KIND_KUBECONFIG="$KUBECONFIG_FILE" SPARKGLASS_IMAGE="$IMAGE" \
    "${PYTHON:-$REPO/.venv/bin/python}" -m pytest "$REPO/e2e/kind" -p no:cacheprovider -v || rc=$?
  if [ "${SPARKGLASS_KIND_KEEP:-}" = 1 ]; then
    log "keeping cluster $CLUSTER (KUBECONFIG=$KUBECONFIG_FILE)"
  else
    cmd_down
  fi
  return "$rc"
}

case "${1:-}" in
  up) cmd_up ;;
  crds) cmd_crds ;;
  load) cmd_load ;;
  install) cmd_install ;;
  down) cmd_down ;;
  all) cmd_all ;;
  kubeconfig) echo "$KUBECONFIG_FILE" ;;
  *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
