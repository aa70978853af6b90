#!/usr/bin/env bash
# `make e2e`: the operator on a real kind cluster with GPU passthrough, for a machine with an NVIDIA GPU,
# Docker and the NVIDIA container toolkit. What it does (details and the host setup: e2e/README.md):
#
#   0. checks every prerequisite first and stops within seconds naming what is missing and how to get it
#   1. builds kind and helm from Go modules if needed (e2e/build-gotool.sh, cached per version)
#   2. creates a kind cluster whose node sees all GPUs (/var/run/nvidia-container-devices/all) and the
#      repository's model_repository/ (hostPath, served to pods through a PV/PVC named `models`)
#   3. installs the NVIDIA container toolkit inside the node and the NVIDIA device plugin (helm)
#   4. builds the operator and assembler images (Dockerfile), `kind load`s them, `helm install`s charts/triton-pipeline
#   5. applies examples/fanout.yaml (GPU instance groups) with modelRepository pvc://models/triton,
#      waits for Ready, port-forwards its Service and checks inference numbers with tritonclient
#   on failure: operator, Triton (init + server) logs, `describe` and events go to $E2E_LOGS
#
# Environment: KEEP_CLUSTER=1 keeps the cluster afterwards; E2E_SCENARIOS=1 then runs the pod-level
# scenarios (tests/cluster/test_node_pipeline.py, tests/cluster/test_node_scenarios.py) on the cluster; CLUSTER_NAME, TRITON_IMAGE,
# NVIDIA_DEVICE_PLUGIN_VERSION, NVIDIA_TOOLKIT_VERSION, READY_TIMEOUT (default 20m: the Triton image
# is ~15 GB) and PYTHON (a python with tritonclient; default .venv/bin/python) override the defaults.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CLUSTER_NAME="${CLUSTER_NAME:-tritonpipeline-gpu}"
NAMESPACE="${NAMESPACE:-ml}"
RELEASE="${RELEASE:-tp}"
RELEASE_NS="${RELEASE_NS:-triton-system}"
IMAGE_REPO="ghcr.io/tritonpipeline/operator"
IMAGE_TAG="e2e"
TRITON_IMAGE="${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:26.08-py3}"
NVIDIA_DEVICE_PLUGIN_VERSION="${NVIDIA_DEVICE_PLUGIN_VERSION:-0.17.1}"
NVIDIA_TOOLKIT_VERSION="${NVIDIA_TOOLKIT_VERSION:-}"   # empty: the latest from NVIDIA's apt repository
READY_TIMEOUT="${READY_TIMEOUT:-20m}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
E2E_LOGS="${E2E_LOGS:-$ROOT/e2e/logs}"
HOST_PORT="${HOST_PORT:-18000}"

say() { printf '>> %s\n' "$*"; }
CHECK_ONLY=0
[ "${1:-}" = --check ] && CHECK_ONLY=1   # prerequisites only (make e2e runs this before building the venv)

# --- 0. prerequisites, all checked before anything is created ---------------------------------------
missing=()
need() { missing+=("$1"); }

if ! command -v docker >/dev/null 2>&1; then
  need "docker: the Docker CLI is not installed. Install Docker Engine: https://docs.docker.com/engine/install/"
elif ! docker_err="$(timeout 10 docker info 2>&1 >/dev/null)"; then
  need "docker engine: \`docker info\` failed ($(printf '%s' "$docker_err" | tail -n 1)). Start the daemon (sudo systemctl start docker) and make sure this user may use it (sudo usermod -aG docker \$USER)"
else
  runtime="$(docker info --format '{{.DefaultRuntime}}' 2>/dev/null || true)"
  if [ "$runtime" != "nvidia" ]; then
    need "docker default runtime is '$runtime', not 'nvidia': install the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html), then: sudo nvidia-ctk runtime configure --runtime=docker --set-as-default && sudo systemctl restart docker"
  fi
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  need "nvidia-smi: not found, so no NVIDIA driver is installed (this target needs a machine with an NVIDIA GPU and its driver: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/)"
elif ! timeout 20 nvidia-smi -L >/dev/null 2>&1; then
  need "nvidia-smi: installed but \`nvidia-smi -L\` fails: the driver is not loaded or no GPU is visible"
fi
TOOLKIT_CONFIG=/etc/nvidia-container-runtime/config.toml
if ! grep -Eq '^[[:space:]]*accept-nvidia-visible-devices-as-volume-mounts[[:space:]]*=[[:space:]]*true' "$TOOLKIT_CONFIG" 2>/dev/null; then
  need "NVIDIA container toolkit: $TOOLKIT_CONFIG must set accept-nvidia-visible-devices-as-volume-mounts = true (kind passes GPUs to its node as the volume mount /var/run/nvidia-container-devices/all): sudo nvidia-ctk config --set accept-nvidia-visible-devices-as-volume-mounts=true --in-place && sudo systemctl restart docker"
fi
if ! command -v kubectl >/dev/null 2>&1; then
  need "kubectl: not found. Install it: https://kubernetes.io/docs/tasks/tools/#kubectl (e.g. curl -LO https://dl.k8s.io/release/\$(curl -Ls https://dl.k8s.io/release/stable.txt)/bin/linux/amd64/kubectl && sudo install kubectl /usr/local/bin/)"
fi
KIND="$(bash "$HERE/build-gotool.sh" kind --print-path)"
HELM="$(bash "$HERE/build-gotool.sh" helm --print-path)"
GO="$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)"
for tool in kind helm; do
  path="$KIND"; [ "$tool" = helm ] && path="$HELM"
  if [ ! -x "$path" ] && [ -z "$GO" ]; then
    need "$tool: not built ($path) and Go is not installed to build it (\`go install\` from the module proxy, see e2e/build-gotool.sh): install Go from https://go.dev/dl/"
  fi
done
if [ "$CHECK_ONLY" = 0 ] && { [ ! -x "$PYTHON" ] || ! "$PYTHON" -c 'import tritonclient.http, numpy' >/dev/null 2>&1; }; then
  need "python with tritonclient: $PYTHON cannot import tritonclient.http (run \`make venv\`, or set PYTHON)"
fi
if [ "${#missing[@]}" -gt 0 ]; then
  {
    echo "make e2e: cannot run the kind + GPU end-to-end test on this machine; missing prerequisites:"
    for m in "${missing[@]}"; do echo "  - $m"; done
    echo "Everything that runs without a GPU or Docker: make e2e-local"
  } >&2
  exit 2
fi
[ "$CHECK_ONLY" = 1 ] && { say "prerequisites for make e2e are in place"; exit 0; }

# --- failure diagnostics ---------------------------------------------------------------------------
KUBECONFIG_FILE="$(mktemp -t kind-gpu-kubeconfig.XXXXXX)"
export KUBECONFIG="$KUBECONFIG_FILE"
PF_PID=""
collect_logs() {
  local rc=$?
  [ -n "$PF_PID" ] && kill "$PF_PID" 2>/dev/null || true
  if [ "$rc" -ne 0 ]; then
    mkdir -p "$E2E_LOGS"
    say "FAILED (exit $rc); collecting logs into $E2E_LOGS"
    kubectl -n "$RELEASE_NS" logs "deployment/$RELEASE-triton-pipeline" --tail=-1 > "$E2E_LOGS/operator.log" 2>&1 || true
    kubectl -n "$NAMESPACE" logs -l app.kubernetes.io/instance=vision --all-containers --prefix --tail=-1 > "$E2E_LOGS/triton.log" 2>&1 || true
    kubectl -n "$NAMESPACE" describe tp,deployment,pods,pvc > "$E2E_LOGS/describe.txt" 2>&1 || true
    kubectl get events -A --sort-by=.lastTimestamp > "$E2E_LOGS/events.txt" 2>&1 || true
    kubectl -n nvidia-device-plugin logs -l app.kubernetes.io/name=nvidia-device-plugin --tail=200 > "$E2E_LOGS/device-plugin.log" 2>&1 || true
    for f in operator.log triton.log; do echo "===== $f (tail) ====="; tail -n 60 "$E2E_LOGS/$f" || true; done
    echo "===== events (tail) ====="; tail -n 30 "$E2E_LOGS/events.txt" || true
  fi
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    "$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
  else
    say "cluster kept: kind get kubeconfig --name $CLUSTER_NAME > kubeconfig; KUBECONFIG=kubeconfig kubectl get tp -A"
  fi
  rm -f "$KUBECONFIG_FILE"
}
trap collect_logs EXIT

# --- 1. kind and helm ------------------------------------------------------------------------------
bash "$HERE/build-gotool.sh" kind
bash "$HERE/build-gotool.sh" helm
HELM_HOME="$(mktemp -d -t kind-gpu-helm.XXXXXX)"
helm() { HELM_CACHE_HOME="$HELM_HOME/cache" HELM_CONFIG_HOME="$HELM_HOME/config" HELM_DATA_HOME="$HELM_HOME/data" "$HELM" "$@"; }

# --- 2. the cluster: GPUs and the model files passed into the node ------------------------------------
say "creating kind cluster $CLUSTER_NAME"
"$KIND" delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
cat > "$HELM_HOME/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraMounts:
      # with accept-nvidia-visible-devices-as-volume-mounts=true the NVIDIA runtime gives the node
      # container every GPU when this path is mounted (the source is irrelevant: /dev/null)
      - hostPath: /dev/null
        containerPath: /var/run/nvidia-container-devices/all
      # the example models, served to the Triton pods by the hostPath PV below
      - hostPath: $ROOT/model_repository
        containerPath: /models/triton
        readOnly: true
EOF
"$KIND" create cluster --name "$CLUSTER_NAME" --config "$HELM_HOME/kind.yaml" --kubeconfig "$KUBECONFIG" --wait 120s
NODE="$CLUSTER_NAME-control-plane"

# --- 3. NVIDIA container toolkit inside the node, then the device plugin -------------------------------
say "installing the NVIDIA container toolkit in $NODE"
docker exec "$NODE" bash -c 'umount -R /proc/driver/nvidia 2>/dev/null || true'  # as nvkind does
docker exec -e V="$NVIDIA_TOOLKIT_VERSION" "$NODE" bash -euc '
  apt-get update -qq && apt-get install -y -qq curl gnupg >/dev/null
  curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
  curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
    | sed "s#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g" \
    > /etc/apt/sources.list.d/nvidia-container-toolkit.list
  apt-get update -qq
  apt-get install -y -qq nvidia-container-toolkit${V:+=$V} >/dev/null
  nvidia-ctk runtime configure --runtime=containerd --set-as-default
  systemctl restart containerd'
kubectl label node "$NODE" nvidia.com/gpu.present=true --overwrite
say "installing the NVIDIA device plugin $NVIDIA_DEVICE_PLUGIN_VERSION"
helm repo add nvdp https://nvidia.github.io/k8s-device-plugin >/dev/null
helm repo update nvdp >/dev/null
helm upgrade --install nvdp nvdp/nvidia-device-plugin --version "$NVIDIA_DEVICE_PLUGIN_VERSION" \
  --namespace nvidia-device-plugin --create-namespace --wait --timeout 5m
for i in $(seq 1 60); do
  gpus="$(kubectl get node "$NODE" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')"
  [ -n "$gpus" ] && [ "$gpus" != 0 ] && break
  sleep 5
done
[ -n "$gpus" ] && [ "$gpus" != 0 ] || { echo "the node advertises no nvidia.com/gpu after 5 minutes" >&2; exit 1; }
say "node $NODE advertises nvidia.com/gpu=$gpus"

# --- 4. the operator and assembler images and the chart -------------------------------------------------
# the assembler (the Dockerfile's target assembler, every Triton pod's init container) under the name the
# chart gives it by default: the operator's repository with the suffix -assembler, the same tag
say "building $IMAGE_REPO:$IMAGE_TAG and $IMAGE_REPO-assembler:$IMAGE_TAG"
docker build -t "$IMAGE_REPO:$IMAGE_TAG" "$ROOT"
docker build --target assembler -t "$IMAGE_REPO-assembler:$IMAGE_TAG" "$ROOT"
"$KIND" load docker-image "$IMAGE_REPO:$IMAGE_TAG" "$IMAGE_REPO-assembler:$IMAGE_TAG" --name "$CLUSTER_NAME"
say "helm install $RELEASE"
helm install "$RELEASE" "$ROOT/charts/triton-pipeline" --namespace "$RELEASE_NS" --create-namespace \
  --set image.repository="$IMAGE_REPO" --set image.tag="$IMAGE_TAG" --set image.pullPolicy=Never --wait --timeout 5m
kubectl -n "$RELEASE_NS" rollout status "deployment/$RELEASE-triton-pipeline" --timeout=3m

# --- 5. the fan-out example on the GPU ------------------------------------------------------------------
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f - <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: tritonpipeline-e2e-models}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadOnlyMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  hostPath: {path: /models, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: models, namespace: $NAMESPACE}
spec:
  accessModes: [ReadOnlyMany]
  storageClassName: ""
  volumeName: tritonpipeline-e2e-models
  resources: {requests: {storage: 1Gi}}
EOF
"$PYTHON" - "$ROOT/examples/fanout.yaml" "$NAMESPACE" "$TRITON_IMAGE" > "$HELM_HOME/vision.yaml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc["metadata"]["namespace"] = sys.argv[2]
doc["spec"]["modelRepository"]["uri"] = "pvc://models/triton"   # the PVC above; model dirs under triton/
doc["spec"]["server"]["image"] = sys.argv[3]
assert doc["spec"]["server"]["gpus"] >= 1
print(yaml.safe_dump(doc, sort_keys=False))
EOF
kubectl apply -f "$HELM_HOME/vision.yaml"
say "waiting up to $READY_TIMEOUT for TritonPipeline vision to be Ready (first pull of $TRITON_IMAGE is slow)"
kubectl -n "$NAMESPACE" wait --for=condition=Ready tp/vision --timeout="$READY_TIMEOUT"
kubectl get tp -A

say "port-forwarding svc/vision to localhost:$HOST_PORT and checking inference"
kubectl -n "$NAMESPACE" port-forward svc/vision "$HOST_PORT:8000" >/dev/null 2>&1 &
PF_PID=$!
for i in $(seq 1 30); do curl -fsS "http://127.0.0.1:$HOST_PORT/v2/health/ready" >/dev/null 2>&1 && break; sleep 1; done
"$PYTHON" "$HERE/infer.py" --url "127.0.0.1:$HOST_PORT" vision
say "PASS: the fan-out pipeline served on a GPU by the operator installed from the chart"

# --- 6. optionally, pod-level scenarios of make e2e on this cluster (e2e/README.md) ------------------------
if [ "${E2E_SCENARIOS:-0}" = 1 ]; then
  say "the pod-level scenarios on $CLUSTER_NAME (the client joins the node container's network namespace: root)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -E"
  TRITONPIPELINE_E2E_KUBECONFIG="$KUBECONFIG" TRITONPIPELINE_E2E_OPERATOR_IMAGE="$IMAGE_REPO:$IMAGE_TAG" \
  TRITONPIPELINE_E2E_ASSEMBLER_IMAGE="$IMAGE_REPO-assembler:$IMAGE_TAG" \
  TRITONPIPELINE_E2E_TRITON_IMAGE="$TRITON_IMAGE" TRITONPIPELINE_E2E_MODELS_DIR=/models \
  TRITONPIPELINE_E2E_NETNS="/proc/$(docker inspect -f '{{.State.Pid}}' "$NODE")/ns/net" \
    $SUDO "$ROOT/.venv/bin/pytest" -m node "$ROOT/tests/cluster/test_node_pipeline.py" "$ROOT/tests/cluster/test_node_scenarios.py"
fi
