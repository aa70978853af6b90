"""Reconciling TritonPipelines: plain async code over the Kube client (kube/) and the pure renderers
in compiler/ and render/, called by the kopf handlers in handlers.py.

- pipeline.py: one reconcile (parse, compile, render, apply, report) and the conditions it writes
- apply.py: server-side apply of the children (owner references set here), pruning, change detection
- status_writer.py: the status writes, the Deployment and pod mirrors, Warning events
- resync.py: the periodic drift repair and the restore of a deleted child
"""
