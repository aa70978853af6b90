"""Control-plane benchmark: the operator against a real kube-apiserver + etcd, next to a floor.

Everything runs on this machine, in one run, against ONE control plane that this script starts
(harness/controlplane.py: upstream etcd + kube-apiserver on loopback; no kubelet, so no pod ever runs):

    single      one CR at a time (examples/fanout.yaml, modelRepository pvc://models/triton, a fresh
                name per run): time from the client's apply to "all children exist" (ConfigMap(s),
                Deployment, Service) and to "status written" (status.observedGeneration ==
                metadata.generation with a SpecValid condition). p50/p99 over the runs.
    operator    N CRs applied as fast as possible from a thread pool; time until every CR has all its
                children AND its status written. The operator is a real subprocess
                (`tritonpipeline run -n NS`), exactly as deployed, only pointed at this apiserver.
    floor       the same N pipelines without the operator: this script parses, compiles and renders
                each one (render_children(tp, compile_pipeline(tp), Settings()), owned by the CR) and
                server-side applies the children itself (Kube.apply), from a thread pool of the same
                size, into another namespace. No CR, no status: the least work that produces the
                same objects.

Completion is observed the same way for both paths: watches on the namespaces (metadata-only for
the children), timestamps taken when the event arrives here. Throughput rounds alternate the order
(floor first, then operator first, ...) and the report gives medians. Between rounds both namespaces
are emptied and the script waits until the operator is idle again.

Also recorded: the operator's peak RSS (VmHWM at the end, VmRSS sampled every 100 ms), CPU seconds of
the operator, kube-apiserver, etcd and this script per phase, and the API requests per CR taken from
the apiserver's own `apiserver_request_total` counters (per verb and resource, this script's own
requests subtracted).

Parts: workload.py (what is applied, per path), watch.py (when each object and status arrived),
process.py (the operator subprocess, sampled), apiserver_metrics.py (requests per CR),
scenarios.py (warm-up, single CRs, bursts per path), report.py (results, targets, the printed table),
__main__.py (the run as a sequence of these steps).

This is a benchmark, not a test: the targets print PASS/FAIL, and the exit status is non-zero only
when something did not complete (1) or the control plane could not start (2).

    .venv/bin/python -m bench.controlplane           # full run, writes bench/results/controlplane.json
    .venv/bin/python -m bench.controlplane --quick   # smoke run, writes results/controlplane-quick.json
"""
