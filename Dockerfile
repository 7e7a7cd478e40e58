# amps-emulator: an AMPS-compatible message server for development and CI.
#   docker build -t amps-emulator .
#   docker run --rm -p 9007:9007 amps-emulator                      # built-in default config
#   docker run --rm -p 9007:9007 -v "$PWD/amps.xml:/etc/amps.xml:ro" amps-emulator /etc/amps.xml
#   docker run --rm -p 9007:9007 -v "$PWD/init:/docker-entrypoint-init.d:ro" amps-emulator
# Whatever address a mounted config gives its first transport, AMPS_EMULATOR_LISTEN (below)
# makes the server listen on 0.0.0.0:9007, where the host's -p reaches it. docs/getting-started/containers.md.

# Base pinned by version; Debian's Python 3.11 in a virtual environment of our own.
FROM debian:12.8-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/amps-emulator
ENV PATH=/opt/amps-emulator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The wheel, built in a stage of its own: no build tools or sources in the final image.
FROM base AS wheel
# a C compiler and the Python headers in this stage only: the wheel carries the compiled hot
# path (amps_emulator/_speedups.c, built by hatch_build.py); the runtime image needs neither
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev python3-dev \
 && rm -rf /var/lib/apt/lists/* \
 && pip install 'hatchling>=1.24'
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY amps_emulator ./amps_emulator
RUN pip wheel --no-deps --no-build-isolation -w /wheels .

FROM base
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home amps \
 && mkdir /data /docker-entrypoint-init.d && chown amps:amps /data
# Dependencies in a layer of their own, from pyproject.toml alone: a source change reuses it.
COPY pyproject.toml /tmp/pyproject.toml
RUN python -c 'import tomllib; print("\n".join(tomllib.load(open("/tmp/pyproject.toml", "rb"))["project"]["dependencies"]))' \
      > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/pyproject.toml /tmp/requirements.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl && rm -rf /tmp/wheels

USER amps
WORKDIR /data
VOLUME /data
# The init directory: mount *.jsonl seed files (published in name order before the server
# reports ready) and at most one *.xml, the configuration when none is given as an argument.
ENV AMPS_EMULATOR_LISTEN=0.0.0.0:9007 \
    AMPS_EMULATOR_DATA_DIR=/data \
    AMPS_EMULATOR_INIT_DIR=/docker-entrypoint-init.d
EXPOSE 9007
# Healthy once a logon on AMPS_EMULATOR_LISTEN is acknowledged (our own codec, no client).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "amps_emulator.probe", "--timeout", "4"]
ENTRYPOINT ["amps-emulator"]
CMD []
