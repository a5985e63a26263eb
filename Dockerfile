# The gputopo image: the admission webhook (`gputopo serve`) and the node topology reporter
# (`gputopo topology report --nvml`), one image for both (manifests/ uses it twice).
#
#   docker build -t REGISTRY/gputopo:0.1.0 .
#   docker push REGISTRY/gputopo:0.1.0
#
# Two stages: wheels are built with pip in the first, the second only installs them, so the
# runtime image holds no build tools and no source tree. It runs as the non-root user
# 65532 that the manifests' securityContext expects, with a read-only root filesystem
# (Python writes no bytecode at run time: PYTHONDONTWRITEBYTECODE).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gputopo ./gputopo
COPY webhook ./webhook
COPY generator ./generator
COPY policies ./policies
# '.[reporter]' adds nvidia-ml-py (NVML bindings); the driver library itself comes from the
# node through the NVIDIA container runtime, not from this image.
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[reporter]'

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'gputopo[reporter]' \
    && rm -rf /wheels \
    && python -m compileall -q "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gputopo"]
CMD ["serve", "--policies", "/etc/gputopo/policies", "--cert-dir", "/etc/gputopo/certs"]
