"""What the project knows about Triton itself, as pure data and functions: its administrative API groups and
their key (security), the tritonserver options a pipeline may set (tritonserver_options), and NVIDIA's
security bulletins per image release (advisories). At the bottom with errors and settings: spec, compiler,
kube, the client and serve all read it."""
