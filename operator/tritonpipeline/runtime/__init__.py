"""The operator process around the kopf handlers (handlers.py): its memory (state), its log lines (logs,
log_events), its Prometheus metrics and health probes, and the admission webhook it serves (admission,
webhook_certificates, webhook_server; its configurations are rendered in render/webhook_configuration.py).
Nothing here renders; it imports settings, errors, spec, compiler and kube, never reconcile, handlers or
cli."""
