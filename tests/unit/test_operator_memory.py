"""The operator's memory does not grow with objects it does not manage: its watches of child kinds ask
the apiserver for its own children only (a label selector on list and watch), so ConfigMaps of other
applications never reach the process. Real kube-apiserver, the operator as a cluster-wide subprocess.
Here the pure tests; those on real components are in tests/component/test_operator_memory.py."""

from __future__ import annotations

import kopf

from helpers import cluster_doc
from tritonpipeline import handlers
from tritonpipeline.compiler import compile_pipeline
from tritonpipeline.render.manifests import render_children
from tritonpipeline.settings import GROUP, Settings
from tritonpipeline.spec import parse_pipeline


def test_every_child_kind_a_handler_watches_is_selected_by_the_apiserver() -> None:
    """Each kind besides TritonPipeline that a handler watches gets the managed-by label selector on
    kopf's list and watch, and that selector matches every rendered child and its pods (else a child
    would be invisible to its handlers)."""
    settings = kopf.OperatorSettings()
    handlers.select_children(settings)
    watched = [h.selector for h in kopf.get_default_registry()._watching.get_all_handlers()]
    children = [s for s in watched if s.group != GROUP]
    assert {s.any_name for s in children} >= {"configmaps", "services", "deployments", "pods"}
    wanted = ["app.kubernetes.io/managed-by=tritonpipeline-operator"]
    for s in children:
        resource = kopf.Resource(str(s.group), str(s.version), str(s.any_name))
        assert settings.watching.label_selectors.collect(resource) == wanted, s
    doc = cluster_doc("vision", "team-a")
    doc["spec"]["autoscaling"] = {"maxReplicas": 2}
    tp = parse_pipeline(doc)
    rendered = render_children(tp, compile_pipeline(tp), Settings())
    pod = rendered.deployment["spec"]["template"]
    for obj in [*rendered.all(), pod]:
        labels = obj["metadata"]["labels"]
        assert labels.get("app.kubernetes.io/managed-by") == "tritonpipeline-operator", obj["metadata"]
