"""Model repositories on a machine's disk: `render` writes one (repository), `serve` runs the local
tritonserver over it (tritonserver), the native router is built here (native_router), and the init container
lays the same repository out in a pod (assemble). Imports spec, compiler and render's packing format, never
the operator runtime or reconcile."""
