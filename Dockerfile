# The operator image: `tritonpipeline run` (the operator) and `tritonpipeline assemble` (the init
# container of every Triton pod it creates). Build: docker build -t ghcr.io/tritonpipeline/operator:0.1.0 .
#
# tests/test_dockerfile.py runs this file's RUN steps (wheel build, venv, pip install) on the host
# in a fresh venv, so keep every install step in a RUN line here.

# pinned: the same Python minor version the tests run on
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- stage 1: build the wheel from the source -------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

# --- stage 2: the native router (compiler/native_router.c) for this image's architecture ------------
# built by the package itself (its flags: tritonpipeline.local.native_router); gcc from Debian where the
# base image has none. The init container puts it beside every native router of a Triton pod.
FROM ${PYTHON_IMAGE} AS native-router
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=wheel /wheels /wheels
RUN command -v gcc >/dev/null 2>&1 \
    || (apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev)
RUN python -m venv /build \
    && /build/bin/pip install "$(echo /wheels/tritonpipeline-*.whl)" \
    && /build/bin/python -m tritonpipeline.local.native_router /native-router/libtriton_tprouter.so

# --- stage 3: install the wheel with exactly what the image runs, and run as non-root --------------
# extras (pinned in pyproject.toml): operator = `tritonpipeline run`; s3, gcs = `tritonpipeline assemble`
# (the init container) with s3:// and gs:// sources. Not serve, client (tritonserver, tritonclient, numpy).
FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/tritonpipeline/bin:$PATH \
    TRITONPIPELINE_NATIVE_ROUTER=/usr/local/lib/tritonpipeline/libtriton_tprouter.so
COPY --from=wheel /wheels /wheels
COPY --from=native-router /native-router/libtriton_tprouter.so /usr/local/lib/tritonpipeline/libtriton_tprouter.so
RUN python -m venv /opt/tritonpipeline \
    && /opt/tritonpipeline/bin/pip install "$(echo /wheels/tritonpipeline-*.whl)[operator,s3,gcs]" \
    && rm -rf /wheels
RUN groupadd --gid 10001 tritonpipeline \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin tritonpipeline
# numeric, so runAsNonRoot can verify it without reading /etc/passwd
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["tritonpipeline"]
CMD ["--help"]
