"""The test harness: the real components that tests, benchmarks and end-to-end runs start on this
machine (etcd + kube-apiserver, helm, nginx, Prometheus, the operator as a subprocess, load on a
tritonserver). Not part of the product: the `tritonpipeline` wheel does not contain it.

Scripts that use it run as modules from the repository root (`python -m bench.controlplane`,
`python -m e2e.kind`), and pytest finds it through `pythonpath` in pyproject.toml.

    controlplane      etcd + kube-apiserver on loopback; its binaries (`controlplane_binaries`), its command
                      line (`python -m harness.controlplane_cli up|down|status`)
    gotools           Go and the tools e2e/build-gotool.sh builds (helm, kind, third-party CRDs)
    helm              helm with a private home; the chart's rendered documents
    kubeapi           API calls tests make beyond the operator's own: dry runs, tokens, CRDs, statuses
    kubeconfig        a token-only kubeconfig and a client for a kubeconfig file
    operator_process  `tritonpipeline run` as a subprocess: local flags, or as the chart's Deployment runs it
    nginx             a real nginx as a consistent-hash load balancer
    prometheus        a real Prometheus scraping loopback targets
    load              closed-loop load with latency percentiles
    s3server          MinIO (S3-compatible, TLS from a test CA) on loopback or inside a network namespace
    wait              wait_for: poll until a value is truthy
    paths             the repository root, e2e/ (build scripts), this venv's `tritonpipeline`
"""
