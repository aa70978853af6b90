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
                each one as the operator does (workload.render: the router the operator chooses, its
                default Settings) and server-side applies the children itself (Kube.apply, owned by
                a made-up CR), from a thread pool of the same size, into another namespace. No CR, no
                status: the least work that produces the same objects.
    restart     N pipelines in place through the operator and N through the floor; the operator
                stopped by its PID and started again (its default resync and status poll): time until
                each pipeline has an outcome line (`reconcile <outcome> (generation N)`) in the new
                process's log, from its start-up line (the target) and from its spawn; next to the
                floor rendering and re-applying every child of its N pipelines. Rounds alternate the
                order. API requests per CR, the new process's peak RSS.
    idle        then the last operator started, alone with its N settled pipelines for a window of
                minutes at its default resync (60 s) and status poll (30 s): its API requests per
                pipeline per minute by verb and resource, writes apart. The apiserver's own requests
                (its lease, every 10 s) are measured with no operator running (in the first restart
                round, between the stop and the start) and taken out, and so are this script's.
    webhook     an operator serving its admission webhook on loopback (its own namespace), and dry runs
                of a small pipeline through it, one at a time: an update (apply of a changed spec) and
                a create (POST dryRun=All); p50/p99 with no large pipeline, with N large ones (a few
                hundred KB each: workload.large_doc) idle (resync 3600 s), and with the same N resyncing
                every few seconds (admission.py).

Completion is observed the same way for both paths: watches on the namespaces (metadata-only for
the children), timestamps taken when the event arrives here. Throughput rounds alternate the order
(floor first, then operator first, ...) and the report gives medians. Between rounds both namespaces
are emptied and the script waits until the operator is idle again.

Also recorded: the operator's peak RSS (VmHWM at the end, VmRSS sampled every 100 ms), CPU seconds of
the operator, kube-apiserver, etcd and this script per phase, and the API requests per CR taken from
the apiserver's own `apiserver_request_total` counters (per verb and resource, this script's own
requests subtracted).

Parts: workload.py (what is applied, per path; the large pipeline), watch.py (when each object and
status arrived), logtail.py (when the operator's log says it reconciled a pipeline), process.py (the
operator subprocess, sampled), apiserver_metrics.py (requests per CR, per pipeline per minute, webhook
calls), scenarios.py (warm-up, single CRs, bursts per path), restart.py (restart rounds, idle window),
admission.py (the webhook scenario), report.py (results, targets, the printed tables), __main__.py (the
run as a sequence of these steps).

This is a benchmark, not a test: the targets print PASS/FAIL, and the exit status is non-zero only
when something did not complete (1) or the control plane could not start (2).

    .venv/bin/python -m bench.controlplane           # full run, writes bench/results/controlplane.json
    .venv/bin/python -m bench.controlplane --quick   # smoke run, writes results/controlplane-quick.json
    .venv/bin/python -m bench.controlplane --restart-rounds 0 --webhook-crs 0   # the bursts only
"""
