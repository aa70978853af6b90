# triton-pipeline developer entry points. Every target installs what it needs on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# where `make cluster-up` keeps the running control plane (pid files, logs, kubeconfig)
CLUSTER_DIR ?= /tmp/tritonpipeline-cluster

.PHONY: help venv lock system-deps grafana-schema demo test test-side test-side-kind test-side-release test-side-releases test-beside-side docs docs-serve lint-manifests lint-manifests-if-go test-unit test-integration golden lint generate bench bench-dataplane \
	bench-router bench-controlplane bench-chaos bench-tenants clean \
	controlplane controlplane-main controlplane-if-go cluster-up cluster-down

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo ">> creating $(VENV) and installing tritonpipeline (first run takes a minute)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)
	@echo ">> $(VENV) ready"

venv: $(STAMP) ## create .venv and install the package with dev tools

# requirements/*.lock: the images' Python dependencies with their hashes, resolved by pip-compile (pip-tools in
# a virtual environment of its own, cached) from pyproject.toml's pins for Linux and the Dockerfile's Python;
# UPGRADE=1 also moves the transitive ones to their newest versions. `make lint` checks they hold the pins.
lock: $(STAMP) ## rewrite requirements/*.lock (hashed, for the images) from pyproject.toml's pins
	$(PY) tools/locks.py $(if $(UPGRADE),--upgrade)

# Debian packages the tests use when present: graphviz renders `tritonpipeline graph --format png`;
# nginx is the consistent-hash load balancer of tests/component/test_affinity.py; prometheus scrapes tritonserver
# in tests/component/test_autoscaling_metrics.py; curl runs the stateful pods' readiness script in a test; haproxy
# hashes the sequence header over a headless Service's DNS answer in tests/component/test_haproxy_dns.py; npm installs
# Grafana's schema packages that tests/component/test_dashboard.py checks the chart's dashboard with (make grafana-schema).
# pipx installs the release's wheel as a user would (tests/component/test_release.py); shellcheck checks the scripts
# of .github/workflows/ when actionlint lints them (make lint, tests/component/test_release.py).
# Each is installed only if its command is missing; without root the tests that need it skip and say why.
SYSTEM_DEPS := dot:graphviz nginx:nginx prometheus:prometheus curl:curl haproxy:haproxy gcc:gcc pipx:pipx shellcheck:shellcheck npm:npm
system-deps: ## install graphviz, nginx, prometheus, curl, haproxy, gcc and npm from Debian if missing (needs root; skipped otherwise)
	@missing=""; for dep in $(SYSTEM_DEPS); do \
	  cmd=$${dep%%:*}; pkg=$${dep##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || [ -x /usr/sbin/$$cmd ] || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo ">> installing$$missing (Debian)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null 2>&1 \
	      || echo ">>$$missing: install failed; the tests that need them will skip"; \
	  else echo ">>$$missing missing and not root: the tests that need them will skip"; fi; \
	fi

demo: $(STAMP) ## serve the fan-out example on a local tritonserver and query it
	$(PY) -m examples.demo

# each step of `make test` runs as a phase (tools/phase.sh): ">> phase NAME: 73s" when it ends, and a line in
# $TRITONPIPELINE_PHASE_LOG when set (.ci/run prints them as a table)
PHASE := bash tools/phase.sh
SUBMAKE := $(MAKE) --no-print-directory

# tests by tier, one folder each (docs/development.md): tests/unit/ pure (no server, no subprocess of the
# CLI, no build), tests/component/ real components on this machine (tritonserver, kube-apiserver, helm,
# nginx, prometheus, image builds, CLI processes), tests/cluster/ real pods on a cluster (kind)
UNIT_TESTS := tests/unit
COMPONENT_TESTS := tests/component
KIND_TESTS := tests/cluster/test_kind.py

# everything, the real-pod tests included: the pod-level scenarios (marker anycluster) on a kind cluster of
# three nodes (tests/cluster/test_kind.py runs them through e2e/kind.py; kind-if-possible builds its node image and
# images first); not the minutes-long HPA cycles of `make e2e-autoscaling` (marker hpa) nor the streams
# bench (streams). Its own pytest runs tests/unit and tests/component; the `node` tests of tests/cluster run
# on the cluster e2e/kind.py starts.
# After the builds, two tracks run at once (tools/beside.sh), the side track (lines prefixed [side]) beside
# lint and every other test: the kind node image then the kind tests (marker kind), then the kube-apiservers
# of the other releases built and their tests run (marker releases), each in a pytest session of its own
test: ## lint, unit, integration and real-pod tests (tritonserver, kube-apiserver, kind)
	@$(PHASE) venv $(SUBMAKE) venv
	@$(PHASE) system-deps $(SUBMAKE) system-deps
	@$(PHASE) build-controlplane $(SUBMAKE) controlplane-if-go
	@$(PHASE) build-helm+crds $(SUBMAKE) helm-if-go
	@$(PHASE) build-minio+gcs $(SUBMAKE) minio-if-go
	@$(PHASE) build-coredns $(SUBMAKE) coredns-if-go
	@$(PHASE) grafana-schema $(PY) -m harness.grafana_schema --install --if-npm
	@bash tools/beside.sh side '$(SUBMAKE) test-side' $(SUBMAKE) test-beside-side

# the side track of `make test`: the release and the releases run even when the kind part failed (-k), make
# exits 2 then
test-side: $(STAMP)
	@$(SUBMAKE) -k test-side-kind test-side-release test-side-releases

test-side-kind: $(STAMP)
	@$(PHASE) side/node-image $(SUBMAKE) kind-if-possible
	@$(PHASE) side/kind env TRITONPIPELINE_PHASE_LOG= $(VENV)/bin/pytest -p no:cacheprovider $(KIND_TESTS)

# a whole `make release` into a temporary directory (tests/component/test_release.py, marker release_build): the images
# the kind track has just built (e2e/images.py's cache), syft built from Go modules (about 4 minutes cold),
# the wheel installed in a fresh venv and by pipx, the chart package rendered by helm: about 45 s warm
test-side-release: $(STAMP)
	@$(PHASE) side/build-syft bash e2e/build-gotool.sh syft --if-go
	@$(PHASE) side/release env TRITONPIPELINE_PHASE_LOG= $(VENV)/bin/pytest -p no:cacheprovider -m release_build $(COMPONENT_TESTS)/test_release.py

# the kube-apiservers of the oldest supported and the newest release: 13 minutes of Go builds cold, which
# the side track has room for after the kind tests
test-side-releases: $(STAMP)
	@$(PHASE) side/build-releases bash e2e/build-controlplane.sh --if-go
	@$(PHASE) side/releases env TRITONPIPELINE_PHASE_LOG= $(VENV)/bin/pytest -p no:cacheprovider $(COMPONENT_TESTS)/test_kube_releases.py

# the part of `make test` that runs beside the side track (tools/beside.sh): on 2 cores the tests leave
# about half the CPU idle while they wait on servers, and the node image's debootstraps as much. The
# side track's tests (a release build, the other releases' kube-apiservers) are left to it by marker
test-beside-side: $(STAMP)
	@$(PHASE) ruff $(VENV)/bin/ruff check operator tests bench examples e2e harness tools
	@$(PHASE) docs $(SUBMAKE) docs
	@$(PHASE) lint-manifests $(SUBMAKE) lint-manifests-if-go
	@$(PHASE) pytest $(VENV)/bin/pytest -m "not releases and not release_build" $(UNIT_TESTS) $(COMPONENT_TESTS)

test-unit: $(STAMP) ## the pure tests: no tritonserver, apiserver, helm, nginx, prometheus, image build, CLI process or cluster
	$(VENV)/bin/pytest -q $(UNIT_TESTS)

# tests/golden/: reviewed compiler outputs; after an intended change, regenerate and review `git diff`
golden: $(STAMP) ## regenerate tests/golden/*/repository from the compiler (then review the diff)
	UPDATE_GOLDEN=1 $(VENV)/bin/pytest -q tests/unit/test_golden.py -k matches_the_golden

test-integration: $(STAMP) system-deps controlplane-if-go helm-if-go minio-if-go coredns-if-go ## the tests that start real components (the scenarios only through the kind test)
	$(VENV)/bin/pytest $(COMPONENT_TESTS) $(KIND_TESTS)

lint: $(STAMP) ## ruff, mypy on operator/, harness/, tools/ and bench/controlplane/ (settings in pyproject.toml), generated files and locks current
	$(VENV)/bin/ruff check operator tests bench examples e2e harness tools
	$(VENV)/bin/ruff format --check operator tests bench examples e2e harness tools
	$(VENV)/bin/mypy
	$(PY) tools/generate.py --check
	$(PY) tools/locks.py --check
	@bash e2e/build-gotool.sh actionlint --if-go >/dev/null; al="$$(bash e2e/build-gotool.sh actionlint --print-path)"; \
	if [ -x "$$al" ]; then "$$al" -no-color && echo ">> actionlint: .github/workflows/ clean"; \
	else echo ">> actionlint is not built (no Go): .github/workflows/ not linted"; fi

# every example (and variants) as the operator applies it and the chart with each ci/ values file, checked by
# kubeconform -strict (schemas from Kubernetes' OpenAPI and the CRDs), kube-score, checkov and helm lint --strict;
# the Go tools are built from Go modules, checkov installed from PyPI, on first use (cached). Findings must be excused in tools/lint-exceptions.yaml.
lint-manifests: $(STAMP) ## render every example and the chart, check them with kubeconform, kube-score, checkov, helm lint
	@$(PY) -m harness.manifest_lint

# for `make test`: without Go only warn (nothing to build the linters with)
lint-manifests-if-go: $(STAMP)
	@if [ -n "$$(. e2e/find-go.sh; echo $$GO)" ]; then $(PY) -m harness.manifest_lint; \
	else echo ">> Go is not installed: lint-manifests skipped (it builds kubeconform and kube-score from Go modules)"; fi

# the CRD (from the spec), its copy in the chart, the prometheus-adapter rules, the Grafana dashboard
# (tools/dashboard.py), the reference pages under docs/reference/ and README's pictures
generate: $(STAMP) ## regenerate every file derived from the code (tools/generate.py; a test checks they are current)
	$(PY) tools/generate.py

# Grafana's dashboard schema as Grafana's npm packages publish it (@grafana/schema, the foundation SDK's
# Prometheus query) and the TypeScript compiler, pinned in tools/grafana-schema/package-lock.json, installed
# with `npm ci` into the tools cache; tests/component/test_dashboard.py checks the chart's dashboard against them
grafana-schema: $(STAMP) ## install the pinned Grafana schema packages the dashboard test checks against (npm)
	$(PY) -m harness.grafana_schema --install

# the documentation site (mkdocs.yml): docs/ built into site/ by MkDocs Material with --strict, so a broken link
# or anchor, a missing page or one left out of nav fails; the pictures are drawn from the code as it builds.
# The site reads offline: Mermaid, which Material would fetch from a CDN, is the npm registry's package (npm
# pack, version and sha512 pinned in tools/mermaid.py), cached with the tools and copied into the site.
docs: $(STAMP) ## build the docs site into site/ (strict; part of `make test`)
	@$(PY) tools/mermaid.py >/dev/null
	@NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --clean
	@echo ">> docs built: site/index.html"

docs-serve: $(STAMP) ## serve the docs site at http://127.0.0.1:8000, rebuilt on every change
	@$(PY) tools/mermaid.py >/dev/null
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict

# Real etcd + kube-apiserver (run by harness/controlplane.py) built from Go modules (e2e/controlplane/), cached under
# ${XDG_CACHE_HOME:-~/.cache}/tritonpipeline/controlplane/<k8s version>/, and the kube-apiserver of the oldest
# supported release and of the newest (tests/component/test_kube_releases.py) next to it (first build on 2 cores: about 7
# minutes for etcd and the suite's kube-apiserver, 13 more for the other two).
controlplane: ## build etcd + kube-apiserver (and those of the oldest supported and the newest release) from Go modules
	@bash e2e/build-controlplane.sh

# etcd and the suite's kube-apiserver only: what cluster-up, bench-controlplane, test-chart and e2e-local start
controlplane-main:
	@bash e2e/build-controlplane.sh --without-releases

# for `make test`: without Go only warn (the control-plane tests then skip and say why); not the other
# releases' kube-apiservers (the side track of `make test` builds them, pytest's session when it needs them)
controlplane-if-go:
	@bash e2e/build-controlplane.sh --if-go --without-releases

cluster-up: $(STAMP) controlplane-main ## start etcd + kube-apiserver in the background; prints KUBECONFIG
	@$(PY) -m harness.controlplane_cli up --dir $(CLUSTER_DIR)

cluster-down: ## stop the control plane started by cluster-up
	@$(PY) -m harness.controlplane_cli down --dir $(CLUSTER_DIR)

bench: bench-dataplane bench-controlplane bench-chaos bench-tenants ## all benchmarks

bench-dataplane: $(STAMP) ## router (Python and native) vs shared vs BLS vs per-step round trips on a real tritonserver
	$(PY) -m bench.dataplane

bench-router: $(STAMP) ## router variants (DLPack, numpy, 2 instances, dynamic batching) vs shared, side by side
	$(PY) -m bench.router_cost

bench-controlplane: $(STAMP) controlplane-main ## operator vs direct-apply floor on a real kube-apiserver (latency, 200 CRs, RSS)
	$(PY) -m bench.controlplane

bench-tenants: $(STAMP) controlplane-main ## a hostile tenant (dry-run storm of 0.9 MB specs, 20 MB metrics page) vs another's admission and reconcile latency
	$(PY) -m bench.controlplane.tenants

# the scenarios of tests/component/test_chaos.py (which `make test` runs too), through pytest: 2.5 minutes, a 60 s
# apiserver outage included; each scenario's numbers and outcome go to bench/results/chaos.json
bench-chaos: $(STAMP) controlplane-main ## chaos on a real kube-apiserver: others' objects, outage, kill -9, failover, CRD skew
	$(PY) -m bench.chaos

clean: ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache

# --- Helm chart, operator image, end-to-end ----------------------------------------------------------
.PHONY: helm helm-if-go chart-crd test-chart e2e e2e-local kind-if-possible

# third-party CRDs the routing/autoscaling tests install into the real apiserver (from their Go modules)
PROVIDER_CRDS := keda-crd istio-crds gateway-api-crds gateway-api-standard-crds envoy-gateway-crds

# helm (and the upstream ServiceMonitor and PrometheusRule CRDs the chart tests validate against, and PROVIDER_CRDS) from Go modules, cached
# under ${XDG_CACHE_HOME:-~/.cache}/tritonpipeline/helm/<version>/ (first build: about 70 s on 2 cores).
helm: ## build helm from Go modules (cached per version outside the repo)
	@bash e2e/build-gotool.sh helm
	@for t in servicemonitor-crd prometheusrule-crd $(PROVIDER_CRDS); do bash e2e/build-gotool.sh $$t; done

# for `make test`: without Go only warn (the chart tests then skip and say why)
helm-if-go:
	@bash e2e/build-gotool.sh helm --if-go
	@for t in servicemonitor-crd prometheusrule-crd $(PROVIDER_CRDS); do bash e2e/build-gotool.sh $$t --if-go; done

# MinIO (the S3-compatible server of the s3:// tests) and fake-gcs-server (Cloud Storage's JSON API, for the
# gs:// download) from Go modules, cached under ${XDG_CACHE_HOME:-~/.cache}/tritonpipeline/<tool>/<version>/
# (first build on 2 cores: MinIO about 130 s, fake-gcs-server about 40 s)
minio-if-go:
	@bash e2e/build-gotool.sh minio --if-go
	@bash e2e/build-gotool.sh fake-gcs-server --if-go

# CoreDNS with its kubernetes plugin (the cluster DNS HAProxy resolves a headless Service with in
# tests/component/test_haproxy_dns.py), cached the same way (first build on 2 cores: about 1 minute with the control
# plane's module and build caches warm, 2.5 from empty ones)
coredns-if-go:
	@bash e2e/build-gotool.sh coredns --if-go

chart-crd: generate ## regenerate the CRD into crds/ and the chart's crds/ (part of `make generate`)

test-chart: $(STAMP) controlplane-main helm ## helm lint/template/install + the operator under the chart's RBAC
	$(VENV)/bin/pytest tests/unit/test_chart.py tests/component/test_chart.py tests/unit/test_dockerfile.py tests/component/test_dockerfile.py

e2e-local: $(STAMP) controlplane-main helm ## apiserver + helm install + operator (chart RBAC) + every example served on tritonserver
	$(PY) -m e2e.local

# kind: one control-plane node and two workers on the running Docker engine (or Debian's, started in a
# network namespace of its own and stopped after; root), kind's published node image or one built here from
# Go modules and Debian (KIND_NODE_IMAGE=local forces it), the chart as README installs it, every example and
# the scenario tests (E2E_SCENARIOS=0: the examples only); a table and bench/results/e2e-kind.json. With an
# NVIDIA GPU and Docker's nvidia runtime it runs the GPU variant (e2e/kind-gpu.sh) instead.
# for `make test`: kind's node image (built here when the published one cannot be pulled) and the images,
# so the kind test (tests/cluster/test_kind.py) starts from them; where no engine can run, only say so
kind-if-possible: $(STAMP) controlplane-if-go
	@if [ "$$(id -u)" != 0 ] && ! command -v docker >/dev/null 2>&1; then echo ">> not root and no Docker: the kind test will skip"; \
	elif [ -z "$$(. e2e/find-go.sh; echo $$GO)" ]; then echo ">> Go is not installed: no kind, the kind test will skip"; \
	else $(PY) -m e2e.kind --prepare; fi

e2e: $(STAMP) ## kind cluster (3 nodes): chart, every example, the scenario tests; GPU nodes where the NVIDIA toolkit is
	@bash e2e/build-gotool.sh minio
	@bash e2e/build-gotool.sh crane
	$(PY) -m e2e.kind

# --- a release ----------------------------------------------------------------------------------------
.PHONY: release

# dist/release/$(VERSION)/: the operator and assembler images as OCI archives (e2e/images.py's buildah build,
# shared with make e2e's cache) and their digests (images.json), the chart package with those digests as its
# defaults, the wheel and sdist, SBOMs by syft (built from Go modules), SHA256SUMS. VERSION must be
# pyproject.toml's version (refused otherwise); REPOSITORY: the operator image's repository (the chart's by
# default). Needs root, buildah, debootstrap and Go (docs/how-to/release.md); cold, about 10 minutes.
release: $(STAMP) ## build a release into dist/release/VERSION/ (images, chart, wheel, SBOM, SHA256SUMS)
	@$(PY) -m e2e.release "$(VERSION)" $(if $(REPOSITORY),--repository $(REPOSITORY))

# --- GPU check ------------------------------------------------------------------------------------------
.PHONY: gpu-pack gpu-check gpu-run
# the Python that runs the check: python3 where it has PyTorch (a GPU host), else the venv's (checks up to the GPU)
GPU_CHECK_PY := $(shell python3 -c "import torch" >/dev/null 2>&1 && echo python3 || echo $(PY))
# the GPU host's Python version, for the wheels and the Python-backend stub in the bundle
GPU_PYTHON ?= $(shell python3 -c "import torch, sys; print(*sys.version_info[:2], sep='.')" 2>/dev/null || echo 3.12)

gpu-pack: $(STAMP) ## pack .gpu/: the wheel's tritonserver (NVIDIA's layout), wheels for the GPU host's Python, CUPTI counter
	$(PY) bench/gpu/pack.py --python-version $(GPU_PYTHON)

gpu-check: gpu-pack ## pack, then run the GPU check here (needs an NVIDIA GPU; says so and exits 2 without one)
	$(GPU_CHECK_PY) bench/gpu/check.py

# on the GPU host itself (no network, no venv): the Python with PyTorch runs the check over the copied .gpu/
gpu-run: ## run the GPU check with the host's python3 over an existing .gpu/ bundle (writes bench/results/gpu.json)
	python3 bench/gpu/check.py

# --- on kind: the HPA loop and the benches that need real pods ----------------------------------------
.PHONY: e2e-autoscaling bench-e2e-node bench-streams bench-upgrade

# not in `make test` (yet): two scale-up/scale-down cycles take minutes (the rate window, then the
# stabilization window); the timeline goes to bench/results/autoscaling.json
e2e-autoscaling: $(STAMP) ## kind: Prometheus + prometheus-adapter + the HPA controller scale a pipeline up and down
	@bash e2e/build-gotool.sh prometheus-adapter
	@bash e2e/build-gotool.sh prometheus
	$(PY) -m e2e.kind --scenarios test_node_autoscaling.py

# broken sequences per routing mode and event (scale-up, scale-down, rollout) and the scale-up reaction
# time, side by side; the table goes to bench/results/streams.json
bench-streams: $(STAMP) ## kind: interleaved sequences through scaling and a rollout, per routing mode
	@bash e2e/build-gotool.sh coredns
	$(PY) -m e2e.kind --scenarios test_node_streams.py

bench-e2e-node: $(STAMP) ## kind: apply -> first correct inference through the Service (p50, max), rollout time
	$(PY) -m e2e.kind --bench bench.e2e_node

bench-upgrade: $(STAMP) ## kind: helm upgrade of the operator under load (restarts, failed requests, refused applies), then a bounded roll
	$(PY) -m e2e.kind --bench bench.upgrade
