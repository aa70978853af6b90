#!/usr/bin/env bash
# Build the node components of the locally built kind node image (e2e/kind_image.py) and the kubectl
# `make e2e` drives it with, cached outside the repo next to the control plane and sharing its Go module and
# build caches (the node components reuse most of kube-apiserver's compiled packages):
#   <cache>/node/<k8s>/bin/   kubelet kube-controller-manager kube-scheduler kube-proxy kubectl kubeadm
#                                                             (e2e/node/, k8s <k8s>)
#                            containerd containerd-shim-runc-v2 ctr   (containerd $CONTAINERD_VERSION)
#                            crictl                           (cri-tools $CRICTL_VERSION; kind's node image)
#                            local-path-provisioner           ($LOCAL_PATH_VERSION; kind's default StorageClass)
#                            pause                            (e2e/node/images/pause: static, the sandbox image)
#   <cache>/node/<k8s>/cni/  host-local loopback portmap ptp  (CNI plugins $CNI_VERSION)
# with <cache> = ${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}. debootstrap and
# buildah (the images) come from Debian (installed here when missing and root). A second run only prints where everything is;
# <dir>/node.env lists the paths and versions, <dir>/build-times.log how long each build took.
#
#   e2e/build-node.sh              build what is missing (fails without Go)
#   e2e/build-node.sh --if-go      same, but only warn and exit 0 when Go is not installed
#   e2e/build-node.sh --print-dir  print the cache directory and exit
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SRC="$HERE/node"

CONTAINERD_VERSION=v2.2.9
CNI_VERSION=v1.9.1
CRICTL_VERSION=v1.36.0        # the cri-tools release kind v0.33's base image carries
LOCAL_PATH_VERSION=v0.0.30    # rancher/local-path-provisioner (its module zip's vendor/ is incomplete: no -mod=vendor)
CONTAINERD_TAGS=no_btrfs,no_devmapper,no_zfs

modver() { awk -v m="$1" '($1==m || ($1=="require" && $2==m)) {print $NF; exit}' "$2"; }
K8S="$(modver k8s.io/kubernetes "$SRC/go.mod")"
ROOT="${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}"
OUT="$ROOT/node/$K8S"
BIN="$OUT/bin"
CNI="$OUT/cni"
K8S_BINS=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl kubeadm)
GO_TOOLS=(crictl local-path-provisioner)
CTR_BINS=(containerd containerd-shim-runc-v2 ctr)
CNI_PLUGINS=(ipam/host-local main/loopback meta/portmap main/ptp)

if_go=0
case "${1:-}" in
  --print-dir) echo "$OUT"; exit 0 ;;
  --if-go) if_go=1 ;;
  "") ;;
  *) echo "usage: $0 [--if-go|--print-dir]" >&2; exit 2 ;;
esac

# the image program is ours: rebuilt when their source changes (the sum of their .go files)
src_sum() { cat "$SRC/images/$1"/*.go | sha256sum | cut -c1-16; }
fresh() { [ -x "$BIN/$1" ] && [ "$(cat "$BIN/$1.src-sum" 2>/dev/null)" = "$(src_sum "$1")" ]; }

missing=()
for b in "${K8S_BINS[@]}" "${CTR_BINS[@]}" "${GO_TOOLS[@]}"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
fresh pause || missing+=(pause)
for p in "${CNI_PLUGINS[@]}"; do [ -x "$CNI/${p##*/}" ] || missing+=("${p##*/}"); done

write_env() {
  cat > "$OUT/node.env.tmp" <<ENV
KUBERNETES_VERSION=$K8S
CONTAINERD_VERSION=$CONTAINERD_VERSION
CNI_VERSION=$CNI_VERSION
CRICTL_VERSION=$CRICTL_VERSION
LOCAL_PATH_VERSION=$LOCAL_PATH_VERSION
BIN_DIR=$BIN
CNI_BIN_DIR=$CNI
ENV
  mv "$OUT/node.env.tmp" "$OUT/node.env"
}

ensure_image_tools() {  # the images (e2e/images.py, e2e/kind_image.py): the Debian rootfs and the operator
  # image built from the Dockerfile
  local need=()
  command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
  command -v buildah >/dev/null 2>&1 || need+=(buildah)
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo ">> installing ${need[*]} (Debian)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; }
  else
    echo ">> ${need[*]} missing and not root: the images cannot be built"
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  [ -f "$OUT/node.env" ] || write_env
  ensure_image_tools
  echo ">> node components cached: k8s $K8S, containerd $CONTAINERD_VERSION, CNI $CNI_VERSION in $OUT"
  exit 0
fi

# shellcheck source=find-go.sh
. "$(dirname "$0")/find-go.sh"
if [ -z "$GO" ]; then
  msg="Go is not installed (no 'go' on PATH or /usr/local/go/bin/go): cannot build the node components (${missing[*]})"
  if [ "$if_go" = 1 ]; then echo ">> $msg; the kind test will skip"; exit 0; fi
  echo "$msg" >&2; exit 1
fi
ensure_image_tools

mkdir -p "$BIN" "$CNI"
# the control plane's caches: kube-apiserver's compiled k8s.io packages are reused as they are
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$ROOT/controlplane/go-mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$ROOT/controlplane/go-build}"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
JOBS="${CONTROLPLANE_BUILD_JOBS:-2}"
GOV="$("$GO" env GOVERSION)"

# progress: a line every 30 s while a long build runs (what, elapsed seconds)
ticker() { local what="$1" t0=$SECONDS; while sleep 30; do echo "   ... $what: $((SECONDS - t0))s"; done; }
timed() {  # timed <name> <version> <command...>
  local name="$1" version="$2" t0=$SECONDS tick; shift 2
  echo ">> building $name $version with $GOV, -p $JOBS ..."
  ticker "$name" & tick=$!
  if ! "$@"; then kill "$tick" 2>/dev/null; wait "$tick" 2>/dev/null || true; return 1; fi
  kill "$tick" 2>/dev/null; wait "$tick" 2>/dev/null || true
  echo ">> built $name $version in $((SECONDS - t0))s"
  echo "$name $version $((SECONDS - t0))s $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores" >> "$OUT/build-times.log"
}

# the version the components report (upstream sets these with -X from hack/lib/version.sh)
minor="${K8S#v1.}"; minor="${minor%%.*}"
V=k8s.io/component-base/version
kx="-X $V.gitVersion=$K8S -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean"
kx="$kx -X $V.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
kx="$kx -X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=1"
kx="$kx -X k8s.io/client-go/pkg/version.gitMinor=$minor"

gobuild() {  # gobuild <name> [<dir>]: the main in e2e/node/<dir, default name> -> $BIN/<name>
  local name="$1" dir="${2:-$1}"
  (cd "$SRC" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -p "$JOBS" -trimpath -ldflags="-s -w $kx" -o "$BIN/$name.tmp" "./$dir")
  mv "$BIN/$name.tmp" "$BIN/$name"
}
goinstall() {  # goinstall <dir> <tags> <package@version>...: go install into <dir> (sums checked by the proxy)
  local dir="$1" tags="$2"; shift 2
  GOBIN="$dir" GOFLAGS=-buildvcs=false "$GO" install -p "$JOBS" -trimpath -tags "$tags" -ldflags="-s -w" "$@"
}

# smallest first, so a failure shows early
fresh pause || { timed "pause (image program)" "e2e/node/images/pause" gobuild pause images/pause && src_sum pause > "$BIN/pause.src-sum"; }
cni_missing=0; for p in "${CNI_PLUGINS[@]}"; do [ -x "$CNI/${p##*/}" ] || cni_missing=1; done
if [ "$cni_missing" = 1 ]; then
  pkgs=(); for p in "${CNI_PLUGINS[@]}"; do pkgs+=("github.com/containernetworking/plugins/plugins/$p@$CNI_VERSION"); done
  timed "CNI plugins (${CNI_PLUGINS[*]##*/})" "$CNI_VERSION" goinstall "$CNI" "" "${pkgs[@]}"
fi
ctr_missing=0; for b in "${CTR_BINS[@]}"; do [ -x "$BIN/$b" ] || ctr_missing=1; done
if [ "$ctr_missing" = 1 ]; then
  pkgs=(); for b in "${CTR_BINS[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$b@$CONTAINERD_VERSION"); done
  timed "containerd, containerd-shim-runc-v2, ctr" "$CONTAINERD_VERSION" goinstall "$BIN" "$CONTAINERD_TAGS" "${pkgs[@]}"
fi
[ -x "$BIN/crictl" ] || timed crictl "$CRICTL_VERSION" goinstall "$BIN" "" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
[ -x "$BIN/local-path-provisioner" ] \
  || timed local-path-provisioner "$LOCAL_PATH_VERSION" goinstall "$BIN" "" "github.com/rancher/local-path-provisioner@$LOCAL_PATH_VERSION"
for b in kube-scheduler kube-proxy kube-controller-manager kubelet kubectl kubeadm; do
  [ -x "$BIN/$b" ] || timed "$b" "$K8S" gobuild "$b"
done
write_env
echo ">> node components ready: $OUT"
