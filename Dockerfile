# The images of triton-pipeline, two targets of this file:
#   operator   (the last stage, what a plain build makes) `tritonpipeline run`, the operator, and every
#              other command. Build: docker build -t ghcr.io/tritonpipeline/operator:0.1.0 .
#   assembler  `tritonpipeline assemble` alone: the init container of every Triton pod the operator creates
#              (the chart's default: the operator's repository with the suffix -assembler, same tag).
#              Build: docker build --target assembler -t ghcr.io/tritonpipeline/operator-assembler:0.1.0 .
#
# Python dependencies come from hashed lock files, requirements/<image>.lock (`make lock` writes them from
# pyproject.toml's pins; `make lint` checks they still hold them): pip installs one with --require-hashes,
# then the project's wheel with --no-deps, so nothing is resolved while an image builds.
#
# tests/component/test_dockerfile.py runs this file's RUN steps (wheel build, venvs, pip installs) on the host
# in fresh venvs, so keep every install step in a RUN line here.

# pinned: the same Python minor version the tests run on (and the locks are resolved for)
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- stage 1: build the wheel from the source -------------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
RUN python -m pip wheel --no-deps --wheel-dir /wheels .

# --- stage 2: the assembler's venv: the wheel with the s3 and gcs extras, from assembler.lock ---------
# the venv's own pip and setuptools are removed once it has installed: no image holds an installer in its venv
FROM ${PYTHON_IMAGE} AS assembler-venv
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=wheel /wheels /wheels
COPY requirements/assembler.lock /wheels/
RUN python -m venv /opt/tritonpipeline \
    && /opt/tritonpipeline/bin/pip install --require-hashes -r /wheels/assembler.lock \
    && /opt/tritonpipeline/bin/pip install --no-deps "$(echo /wheels/tritonpipeline-*.whl)" \
    && /opt/tritonpipeline/bin/python -m pip uninstall --yes pip setuptools

# --- stage 3: the native router (compiler/native_router.c) for this image's architecture ------------
# built by the package itself (its flags: tritonpipeline.local.native_router), in the assembler's venv;
# gcc from Debian where the base image has none. The init container puts it beside every native router
# of a Triton pod.
FROM assembler-venv AS native-router
RUN command -v gcc >/dev/null 2>&1 \
    || (apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev)
RUN /opt/tritonpipeline/bin/python -m tritonpipeline.local.native_router /native-router/libtriton_tprouter.so

# --- stage 4: what both images share: the native router where the init container looks for it, and
# the non-root user they run as
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/tritonpipeline/bin:$PATH \
    TRITONPIPELINE_NATIVE_ROUTER=/usr/local/lib/tritonpipeline/libtriton_tprouter.so
COPY --from=native-router /native-router/libtriton_tprouter.so /usr/local/lib/tritonpipeline/libtriton_tprouter.so
RUN groupadd --gid 10001 tritonpipeline \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin tritonpipeline
WORKDIR /tmp

# --- stage 5: the assembler image (--target assembler): the assembler's venv, and no installer -------
# the core, s3 and gcs extras (pvc://, s3:// and gs:// sources): not kopf, the Kubernetes client, aiohttp
# nor the serving stack. The base image's pip, setuptools and wheel are removed, and the wheels
# ensurepip would install them from: nothing in this image installs a package. (A distribution's Python,
# whose pip its package manager owns (EXTERNALLY-MANAGED: e2e/images.py's Debian base), keeps it.)
FROM runtime AS assembler
COPY --from=assembler-venv /opt/tritonpipeline /opt/tritonpipeline
RUN (python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
     || python -c "import pathlib, sys, sysconfig; sys.exit(not pathlib.Path(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED').exists())") \
    && rm -rf /usr/local/lib/python3.*/ensurepip/_bundled
# numeric, so runAsNonRoot can verify it without reading /etc/passwd
USER 10001:10001
ENTRYPOINT ["tritonpipeline"]
CMD ["assemble", "--help"]

# --- stage 6: the operator image (the default target): the wheel with exactly what the image runs ----
# extras (pinned in pyproject.toml, locked in operator.lock): operator = `tritonpipeline run`; s3, gcs =
# `tritonpipeline assemble` with s3:// and gs:// sources. Not serve, client (tritonserver, tritonclient,
# numpy).
FROM runtime AS operator
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=wheel /wheels /wheels
COPY requirements/operator.lock /wheels/
RUN python -m venv /opt/tritonpipeline \
    && /opt/tritonpipeline/bin/pip install --require-hashes -r /wheels/operator.lock \
    && /opt/tritonpipeline/bin/pip install --no-deps "$(echo /wheels/tritonpipeline-*.whl)" \
    && /opt/tritonpipeline/bin/python -m pip uninstall --yes pip setuptools \
    && rm -rf /wheels
# numeric, so runAsNonRoot can verify it without reading /etc/passwd
USER 10001:10001
ENTRYPOINT ["tritonpipeline"]
CMD ["--help"]
