#!/usr/bin/env bash
# Build a pinned Go command-line tool with `go install MODULE/CMD@VERSION` and cache it outside the repo,
# keyed by tool and version (same cache root as build-controlplane.sh):
#   ${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}/<tool>/<version>/<tool>
# A second run only prints where it is. Module downloads are checked against sum.golang.org (served
# through the module proxy), so no go.sum needs to be committed for these tools.
#
#   e2e/build-gotool.sh helm              build helm if missing (fails without Go)
#   e2e/build-gotool.sh helm --if-go      same, but only warn and exit 0 when Go is not installed
#   e2e/build-gotool.sh helm --print-path print the binary's path and exit
#   e2e/build-gotool.sh kind ...          the same for kind (make e2e)
#   e2e/build-gotool.sh minio ...         the same for MinIO (the S3-compatible server of the s3:// tests)
#   e2e/build-gotool.sh fake-gcs-server ...  the same for fake-gcs-server (Cloud Storage's JSON API)
#   e2e/build-gotool.sh servicemonitor-crd  the upstream prometheus-operator ServiceMonitor CRD, taken
#                                         from its Go module (tests validate the chart's ServiceMonitor)
#   e2e/build-gotool.sh prometheusrule-crd  its PrometheusRule CRD likewise (the chart's alerts)
#   e2e/build-gotool.sh keda-crd          KEDA's ScaledObject CRD (github.com/kedacore/keda/v2)
#   e2e/build-gotool.sh istio-crds        Istio's CRDs, DestinationRule among them (istio.io/api)
#   e2e/build-gotool.sh gateway-api-crds  Gateway API GatewayClass, Gateway, HTTPRoute and GRPCRoute CRDs,
#                                         experimental channel (the one with sessionPersistence;
#                                         sigs.k8s.io/gateway-api)
#   e2e/build-gotool.sh gateway-api-standard-crds  the same four from the standard channel
#   e2e/build-gotool.sh envoy-gateway-crds  Envoy Gateway's BackendTrafficPolicy CRD (github.com/envoyproxy/gateway)
#   e2e/build-gotool.sh prometheus-adapter  the custom metrics API server the HPA reads (tests/cluster/test_node_autoscaling.py)
#   e2e/build-gotool.sh prometheus        Prometheus with Kubernetes service discovery (Debian's package is built
#                                         without it), only that discovery plugin compiled in (same test)
#   e2e/build-gotool.sh kubeconform       kubeconform, the manifest schema validator (make lint-manifests)
#   e2e/build-gotool.sh kube-score        kube-score, the manifest best-practice checker (make lint-manifests)
#   e2e/build-gotool.sh kubernetes-openapi  Kubernetes' OpenAPI document (api/openapi-spec/swagger.json of
#                                         k8s.io/kubernetes at the control plane's version): kubeconform's schemas
#   e2e/build-gotool.sh syft              syft, the SBOM generator of `make release` (scans the operator image's OCI archive)
#   e2e/build-gotool.sh actionlint        actionlint, the GitHub Actions workflow linter (`make lint`: .github/workflows/)
#   e2e/build-gotool.sh crane             go-containerregistry's crane: the release workflow pushes the OCI archives with it
#   e2e/build-gotool.sh coredns           CoreDNS with its kubernetes plugin (the cluster DNS that answers a headless
#                                         Service's name; harness/coredns.py), only the plugins listed below compiled in
set -euo pipefail

# The pinned versions: bump here (harness/gotools.py reads them with --print-path).
HELM_VERSION=v3.22.0   # latest helm v3 on the module proxy when pinned
KIND_VERSION=v0.33.0   # latest kind on the module proxy when pinned
PROMETHEUS_OPERATOR_VERSION=v0.85.0
KEDA_VERSION=v2.21.0          # latest KEDA v2 on the module proxy when pinned
ISTIO_API_VERSION=v1.31.1     # latest istio.io/api when pinned
GATEWAY_API_VERSION=v1.6.3    # v1.7.0 needs Go >= 1.27
ENVOY_GATEWAY_VERSION=v1.9.1  # latest Envoy Gateway on the module proxy when pinned
PROMETHEUS_ADAPTER_VERSION=v0.12.0  # latest sigs.k8s.io/prometheus-adapter release on the module proxy when pinned
PROMETHEUS_VERSION=v0.316.0   # Prometheus 3.16.0 (its Go module numbers v3.X.Y as v0.3XX.Y), latest when pinned
# MinIO tags releases as RELEASE.<date>, which the module proxy does not serve: pin the pseudo-version of
# the last commit of github.com/minio/minio (the S3-compatible server of tests/component/test_s3_source.py)
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
# a server of Cloud Storage's JSON API (no authentication): the gs:// download of tests/component/test_gcs_source.py
FAKE_GCS_SERVER_VERSION=v1.56.1
KUBECONFORM_VERSION=v0.8.0    # latest kubeconform on the module proxy when pinned
KUBE_SCORE_VERSION=v1.20.0    # latest kube-score on the module proxy when pinned
# the Kubernetes version whose API the control plane serves (its go.mod pins it): the schemas match it
KUBERNETES_VERSION="$(awk '$1=="k8s.io/kubernetes" {print $2; exit}' "$(dirname "$0")/controlplane/kube-apiserver/go.mod")"
SYFT_VERSION=v1.57.1          # latest syft on the module proxy when pinned (needs Go >= 1.26.8)
ACTIONLINT_VERSION=v1.7.12    # latest actionlint on the module proxy when pinned
CRANE_VERSION=v0.22.1         # latest github.com/google/go-containerregistry when pinned
COREDNS_VERSION=v1.15.0       # latest CoreDNS on the module proxy when pinned (needs Go >= 1.26)
# the CoreDNS plugins compiled in (upstream's plugin.cfg names, kept in its order): the kubernetes plugin
# and what a Corefile around it uses (kubeadm's Corefile: errors health ready kubernetes prometheus forward
# cache loop reload loadbalance; the kind node image's CoreDNS runs it); the cloud back ends (Azure,
# Route 53, ...) are most of the build. The set is part of the cache path.
COREDNS_PLUGINS="bind ready health errors log loadbalance kubernetes whoami prometheus forward cache loop reload"

tool="${1:-}"
case "$tool" in
  helm) pkg="helm.sh/helm/v3/cmd/helm"; version="$HELM_VERSION" ;;
  kind) pkg="sigs.k8s.io/kind"; version="$KIND_VERSION" ;;
  minio) pkg="github.com/minio/minio"; version="$MINIO_VERSION" ;;
  fake-gcs-server) pkg="github.com/fsouza/fake-gcs-server"; version="$FAKE_GCS_SERVER_VERSION" ;;
  servicemonitor-crd|prometheusrule-crd) pkg="github.com/prometheus-operator/prometheus-operator"; version="$PROMETHEUS_OPERATOR_VERSION" ;;
  keda-crd) pkg="github.com/kedacore/keda/v2"; version="$KEDA_VERSION" ;;
  istio-crds) pkg="istio.io/api"; version="$ISTIO_API_VERSION" ;;
  gateway-api-crds|gateway-api-standard-crds) pkg="sigs.k8s.io/gateway-api"; version="$GATEWAY_API_VERSION" ;;
  envoy-gateway-crds) pkg="github.com/envoyproxy/gateway"; version="$ENVOY_GATEWAY_VERSION" ;;
  prometheus-adapter) pkg="sigs.k8s.io/prometheus-adapter/cmd/adapter"; version="$PROMETHEUS_ADAPTER_VERSION" ;;
  prometheus) pkg="github.com/prometheus/prometheus/cmd/prometheus"; version="$PROMETHEUS_VERSION" ;;
  coredns) pkg="github.com/coredns/coredns"; version="$COREDNS_VERSION" ;;
  kubeconform) pkg="github.com/yannh/kubeconform/cmd/kubeconform"; version="$KUBECONFORM_VERSION" ;;
  kube-score) pkg="github.com/zegl/kube-score/cmd/kube-score"; version="$KUBE_SCORE_VERSION" ;;
  kubernetes-openapi) pkg="k8s.io/kubernetes"; version="$KUBERNETES_VERSION" ;;
  syft) pkg="github.com/anchore/syft/cmd/syft"; version="$SYFT_VERSION" ;;
  actionlint) pkg="github.com/rhysd/actionlint/cmd/actionlint"; version="$ACTIONLINT_VERSION" ;;
  crane) pkg="github.com/google/go-containerregistry/cmd/crane"; version="$CRANE_VERSION" ;;
  *) echo "usage: $0 helm|kind|minio|fake-gcs-server|servicemonitor-crd|prometheusrule-crd|keda-crd|istio-crds|gateway-api-crds|gateway-api-standard-crds|envoy-gateway-crds|prometheus-adapter|prometheus|coredns|kubeconform|kube-score|kubernetes-openapi|syft|actionlint|crane [--if-go|--print-path]" >&2; exit 2 ;;
esac
ROOT="${TRITONPIPELINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tritonpipeline}"
OUT="$ROOT/$tool/$version"
[ "$tool" = coredns ] && OUT="$OUT-$(printf '%s' "$COREDNS_PLUGINS" | sha256sum | cut -c1-8)"
BIN="$OUT/$tool"
case "$tool" in
  servicemonitor-crd) BIN="$OUT/monitoring.coreos.com_servicemonitors.yaml" ;;
  prometheusrule-crd) BIN="$OUT/monitoring.coreos.com_prometheusrules.yaml" ;;
  keda-crd) BIN="$OUT/keda.sh_scaledobjects.yaml" ;;
  istio-crds) BIN="$OUT/customresourcedefinitions.gen.yaml" ;;
  gateway-api-crds) BIN="$OUT/experimental-gateways-and-routes.yaml" ;;
  gateway-api-standard-crds) BIN="$OUT/standard-gateways-and-routes.yaml" ;;
  envoy-gateway-crds) BIN="$OUT/gateway.envoyproxy.io_backendtrafficpolicies.yaml" ;;
  kubernetes-openapi) BIN="$OUT/swagger.json" ;;
esac

if_go=0
case "${2:-}" in
  --print-path) echo "$BIN"; exit 0 ;;
  --if-go) if_go=1 ;;
  "") ;;
  *) echo "usage: $0 TOOL [--if-go|--print-path]" >&2; exit 2 ;;
esac

if [ -f "$BIN" ]; then
  echo ">> $tool $version cached: $BIN"
  exit 0
fi

# shellcheck source=find-go.sh
. "$(dirname "$0")/find-go.sh"
if [ -z "$GO" ]; then
  msg="Go is not installed (no 'go' on PATH or /usr/local/go/bin/go): cannot build $tool $version"
  if [ "$if_go" = 1 ]; then echo ">> $msg; tests that need $tool will skip"; exit 0; fi
  echo "$msg" >&2; exit 1
fi

mkdir -p "$OUT"
# module and build caches shared with the control-plane build (many k8s.io modules are the same)
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$ROOT/controlplane/go-mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$ROOT/controlplane/go-build}"
export GOFLAGS="-buildvcs=false"
export CGO_ENABLED=0
export GOTOOLCHAIN=local
export GOWORK=off  # a module's own go.work (Prometheus ships one) names directories its module zip lacks
export GOBIN="$OUT/.gobin"
t0=$SECONDS
if [ "$tool" = servicemonitor-crd ] || [ "$tool" = prometheusrule-crd ]; then
  # a plain module download (checked against sum.golang.org); the CRD is a file of that module
  dir="$("$GO" mod download -json "$pkg@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  cp "$dir/example/prometheus-operator-crd/$(basename "$BIN")" "$BIN.tmp"
  chmod 644 "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  echo ">> $tool from $pkg $version -> $BIN"
  exit 0
fi
case "$tool" in
  keda-crd|istio-crds|gateway-api-crds|gateway-api-standard-crds|envoy-gateway-crds|kubernetes-openapi)
    # CRDs of third-party projects and Kubernetes' OpenAPI document, files of their Go modules (checked
    # against sum.golang.org)
    dir="$("$GO" mod download -json "$pkg@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
    [ -n "$dir" ] || { echo "go mod download $pkg@$version failed" >&2; exit 1; }
    case "$tool" in
      keda-crd) cat "$dir/config/crd/bases/keda.sh_scaledobjects.yaml" > "$BIN.tmp" ;;
      kubernetes-openapi) cat "$dir/api/openapi-spec/swagger.json" > "$BIN.tmp" ;;
      istio-crds) cat "$dir/kubernetes/customresourcedefinitions.gen.yaml" > "$BIN.tmp" ;;
      gateway-api-crds|gateway-api-standard-crds)
        channel=experimental; [ "$tool" = gateway-api-standard-crds ] && channel=standard
        for kind in gatewayclasses gateways httproutes grpcroutes; do
          cat "$dir/config/crd/$channel/gateway.networking.k8s.io_$kind.yaml"; echo "---"
        done > "$BIN.tmp" ;;
      envoy-gateway-crds)
        cat "$dir/charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml" > "$BIN.tmp" ;;
    esac
    chmod 644 "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
    echo ">> $tool from $pkg $version -> $BIN"
    exit 0 ;;
esac
if [ "$tool" = coredns ]; then
  # upstream's way to choose plugins: edit plugin.cfg, regenerate (directives_generate.go), build. The
  # module cache is read-only, so that happens in a copy of the downloaded module (its own go.mod, go.sum)
  echo ">> downloading $pkg@$version ..."
  dir="$("$GO" mod download -json "$pkg@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -n "$dir" ] || { echo "go mod download $pkg@$version failed" >&2; exit 1; }
  src="$OUT/.src"
  rm -rf "$src" && cp -r "$dir" "$src" && chmod -R u+w "$src"
  keep="$(printf '%s\n' $COREDNS_PLUGINS)"
  grep -E '^[a-z0-9_]+:' "$dir/plugin.cfg" | while IFS= read -r line; do
    if printf '%s\n' "$keep" | grep -qx "${line%%:*}"; then echo "$line"; fi
  done > "$src/plugin.cfg"
  cd "$src"
  "$GO" run directives_generate.go
  pkg="."; at_version=""
fi
echo ">> building $tool $version with $("$GO" env GOVERSION) (go install $pkg@$version; first time, a few minutes) ..."
# upstream's release builds set the version with -X; without it `helm version` says v3.x-unreleased
ldflags="-s -w"
if [ "$tool" = helm ]; then
  # what upstream's Makefile sets: the version, and the Kubernetes version that `helm template` and
  # `helm lint` assume (.Capabilities.KubeVersion, deprecation checks) from helm's k8s.io/client-go
  gomod="$("$GO" mod download -json "helm.sh/helm/v3@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  kminor="$(awk '$1=="k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$gomod")"
  ldflags="$ldflags -X helm.sh/helm/v3/internal/version.version=$version"
  for pkg_ in pkg/lint/rules pkg/chartutil; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg_.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg_.k8sVersionMinor=$kminor"
  done
fi
tags=""
if [ "$tool" = coredns ]; then ldflags="$ldflags -X github.com/coredns/coredns/coremain.GitCommit=$version"; fi
# what upstream's release builds set (.goreleaser.yaml): `syft version` and `actionlint -version` name it
if [ "$tool" = syft ]; then ldflags="$ldflags -X main.version=${version#v}"; fi
if [ "$tool" = actionlint ]; then ldflags="$ldflags -X github.com/rhysd/actionlint.version=${version#v}"; fi
if [ "$tool" = prometheus ]; then
  # upstream's build tags: no service discovery plugin but Kubernetes' (a fraction of the dependencies)
  tags="remove_all_sd,enable_kubernetes_sd"
  ldflags="$ldflags -X github.com/prometheus/common/version.Version=3.${version#v0.3}"
fi
if [ "$tool" = prometheus-adapter ] || [ "$tool" = prometheus ]; then
  # `go install MOD@VERSION` asks the proxy for the module's version list (deprecation check), which the
  # proxy here refuses for some modules; build inside the downloaded module with its own go.mod and go.sum
  mod="${pkg%/cmd/*}"
  echo ">> downloading $mod@$version ..."
  dir="$("$GO" mod download -json "$mod@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  [ -n "$dir" ] || { echo "go mod download $mod@$version failed" >&2; exit 1; }
  pkg="./${pkg#"$mod"/}"; at_version=""
  cd "$dir"
fi
# progress: `go install -v` names each package it compiles; print a count every 50 and any error line whole
"$GO" install -v -p "${GOTOOL_BUILD_JOBS:-2}" -trimpath -tags="$tags" -ldflags="$ldflags" "$pkg${at_version-@$version}" 2>&1 \
  | { n=0; while IFS= read -r line; do
        case "$line" in
          *" "*|*:*) echo "$line" ;;
          *) n=$((n + 1)); if [ $((n % 50)) = 0 ]; then echo ">> $tool: $n packages compiled, $((SECONDS - t0))s ($line)"; fi ;;
        esac
      done; }
if [ "$tool" = coredns ]; then mv "$GOBIN/coredns" "$BIN" && cd / && rm -rf "$OUT/.src"
else mv "$GOBIN/$(basename "$pkg")" "$BIN"; fi
rmdir "$GOBIN" 2>/dev/null || true
echo ">> built $tool $version in $((SECONDS - t0))s -> $BIN"
echo "$tool $version $((SECONDS - t0))s $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores" >> "$ROOT/$tool/build-times.log"
