#!/usr/bin/env bash
# Build the real control plane for tests: kube-apiserver (k8s.io/kubernetes, see
# controlplane/kube-apiserver/go.mod) and etcd (go.etcd.io/etcd/server/v3, see controlplane/etcd/go.mod),
# and the kube-apiserver of the oldest Kubernetes the chart supports and of the newest release
# (controlplane/kube-apiserver-{floor,newest}/go.mod, the same main.go; they run on the same etcd), which
# tests/component/test_kube_releases.py checks what we ship against.
#
# Binaries are cached outside the repo, keyed by the Kubernetes version:
#   ${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}/controlplane/<k8s>/{kube-apiserver,etcd}
#   .../controlplane/<oldest k8s>/kube-apiserver, .../controlplane/<newest k8s>/kube-apiserver
# and a second run only prints where they are. <dir>/controlplane.env lists the paths and versions
# (harness/controlplane_binaries.py computes the same directory).
#
#   e2e/build-controlplane.sh                     build if missing (fails without Go)
#   e2e/build-controlplane.sh --if-go             same, but only warn and exit 0 when Go is not installed
#   e2e/build-controlplane.sh --without-releases  only etcd and the kube-apiserver the suite runs on (`make
#                                                 test` builds the other two in its second track)
#   e2e/build-controlplane.sh --print-dir         print the cache directory and exit
# (--if-go and --without-releases combine)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
SRC="$HERE/controlplane"

modver() { awk -v m="$1" '($1==m || ($1=="require" && $2==m)) {print $NF; exit}' "$2"; }
K8S="$(modver k8s.io/kubernetes "$SRC/kube-apiserver/go.mod")"
ETCD="$(modver go.etcd.io/etcd/server/v3 "$SRC/etcd/go.mod")"
FLOOR="$(modver k8s.io/kubernetes "$SRC/kube-apiserver-floor/go.mod")"
NEWEST="$(modver k8s.io/kubernetes "$SRC/kube-apiserver-newest/go.mod")"
CACHE="${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}/controlplane"
OUT="$CACHE/$K8S"
FLOOR_OUT="$CACHE/$FLOOR"
NEWEST_OUT="$CACHE/$NEWEST"

if_go=0 releases=1
for arg in "$@"; do
  case "$arg" in
    --print-dir) echo "$OUT"; exit 0 ;;
    --if-go) if_go=1 ;;
    --without-releases) releases=0 ;;
    *) echo "usage: $0 [--if-go] [--without-releases] | --print-dir" >&2; exit 2 ;;
  esac
done

write_env() {
  cat > "$OUT/controlplane.env.tmp" <<ENV
KUBERNETES_VERSION=$K8S
ETCD_VERSION=$ETCD
KUBE_APISERVER=$OUT/kube-apiserver
ETCD=$OUT/etcd
ENV
  mv "$OUT/controlplane.env.tmp" "$OUT/controlplane.env"
}

releases_built() { [ -x "$FLOOR_OUT/kube-apiserver" ] && [ -x "$NEWEST_OUT/kube-apiserver" ]; }
if [ "$releases" = 1 ]; then also=" (and $FLOOR, $NEWEST)"; else also=""; fi
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/etcd" ] && { [ "$releases" = 0 ] || releases_built; }; then
  [ -f "$OUT/controlplane.env" ] || write_env
  echo ">> control plane cached: kube-apiserver $K8S$also, etcd $ETCD in $CACHE"
  exit 0
fi

# shellcheck source=find-go.sh
. "$(dirname "$0")/find-go.sh"
if [ -z "$GO" ]; then
  msg="Go is not installed (no 'go' on PATH or /usr/local/go/bin/go): cannot build kube-apiserver $K8S$also / etcd $ETCD"
  if [ "$if_go" = 1 ]; then echo ">> $msg; control-plane tests will skip"; exit 0; fi
  echo "$msg" >&2; exit 1
fi

mkdir -p "$OUT"
# Module and build caches live next to the binaries so they survive `make clean` and version bumps.
# go.sum is committed: every download is checked against it (sum.golang.org is not needed).
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$CACHE/go-mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$CACHE/go-build}"
export GOFLAGS="-mod=readonly"
export CGO_ENABLED=0
# kube-apiserver links ~2,000 packages; two compile jobs keep peak memory near 2-3 GiB.
JOBS="${CONTROLPLANE_BUILD_JOBS:-2}"

build() {  # build <name> <version> <module dir> <output dir> [ldflags...]
  local name="$1" version="$2" dir="$3" out="$4" x="$5" t0=$SECONDS
  echo ">> building $name $version (first time, several minutes) with $("$GO" env GOVERSION), -p $JOBS ..."
  (cd "$dir" && "$GO" build -p "$JOBS" -trimpath -ldflags="-s -w $x" -o "$out/$name.tmp" .)
  mv "$out/$name.tmp" "$out/$name"
  echo ">> built $name $version in $((SECONDS - t0))s -> $out/$name"
  echo "$name $version $((SECONDS - t0))s $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores" >> "$out/build-times.log"
}

version_flags() {  # the version the apiserver reports on /version (upstream: -X from hack/lib/version.sh)
  local minor="${1#v1.}" V=k8s.io/component-base/version
  minor="${minor%%.*}"
  echo "-X $V.gitVersion=$1 -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean" \
    "-X $V.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

[ -x "$OUT/etcd" ] || build etcd "$ETCD" "$SRC/etcd" "$OUT" ""
[ -x "$OUT/kube-apiserver" ] || build kube-apiserver "$K8S" "$SRC/kube-apiserver" "$OUT" "$(version_flags "$K8S")"
write_env
if [ "$releases" = 1 ]; then
  mkdir -p "$FLOOR_OUT" "$NEWEST_OUT"
  [ -x "$FLOOR_OUT/kube-apiserver" ] ||
    build kube-apiserver "$FLOOR" "$SRC/kube-apiserver-floor" "$FLOOR_OUT" "$(version_flags "$FLOOR")"
  [ -x "$NEWEST_OUT/kube-apiserver" ] ||
    build kube-apiserver "$NEWEST" "$SRC/kube-apiserver-newest" "$NEWEST_OUT" "$(version_flags "$NEWEST")"
fi
echo ">> control plane ready: $OUT"
