# amps-emulator: an AMPS-compatible message server for development and CI.
#   docker build -t amps-emulator .
#   docker run --rm -p 9007:9007 amps-emulator                      # built-in default config
#   docker run --rm -p 9007:9007 -v "$PWD/amps.xml:/etc/amps.xml:ro" amps-emulator /etc/amps.xml
#   docker run --rm -p 9007:9007 -v "$PWD/init:/docker-entrypoint-init.d:ro" amps-emulator
# Whatever address a mounted config gives its first transport, AMPS_EMULATOR_LISTEN (below)
# makes the server listen on 0.0.0.0:9007, where the host's -p reaches it. With podman:
# docs/getting-started/containers.md (and behind a TLS-inspecting proxy, the build's
# --secret id=ca-certificates there).
#
# The final image holds Debian's Python and a virtual environment with the server and its
# dependencies, nothing else: pip, the compiler, the headers and the wheel are in the build
# stages only.

# Base pinned by version; Debian's Python 3.11: the interpreter and its standard library.
FROM debian:12.8-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

# The requirements, read from pyproject.toml: the next stage copies the files, and its cache
# keys on their content, so a pyproject.toml change elsewhere (a version, a test extra)
# reuses the dependency layer.
FROM base AS requirements
COPY pyproject.toml /tmp/pyproject.toml
RUN python3 -c 'import sys, tomllib; p = tomllib.load(open(sys.argv[1], "rb")); \
      open("/requirements.txt", "w").write("\n".join(p["project"]["dependencies"]) + "\n"); \
      open("/build-requirements.txt", "w").write("\n".join(p["build-system"]["requires"]) + "\n")' \
      /tmp/pyproject.toml

# The build stage: a C compiler and the Python headers (for the compiled hot path,
# amps_emulator/_speedups.c, and any dependency without a wheel), pip and hatchling in a venv of
# their own (/opt/build-tools), and the runtime venv (/opt/amps-emulator) without pip.
FROM base AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv python3-dev gcc libc6-dev binutils \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/build-tools \
 && python3 -m venv --without-pip /opt/amps-emulator
ENV PATH=/opt/build-tools/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
COPY --from=requirements /requirements.txt /build-requirements.txt /tmp/
# Behind a TLS-inspecting proxy pip trusts the CA bundle passed as a build secret
# (--secret id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt); the image keeps nothing
# of it. The dependencies go into the runtime venv, their libraries stripped of debugging
# symbols (uvloop's alone carries about 10 MB of them), then compiled to bytecode: 12 MB that
# halve the server's start (about 0.5 s to 0.25 s) and speed each health probe
# (bench/bench_image_startup.py).
RUN --mount=type=secret,id=ca-certificates \
    if [ -s /run/secrets/ca-certificates ]; then export PIP_CERT=/run/secrets/ca-certificates; fi \
 && pip install -r /tmp/build-requirements.txt \
 && pip --python /opt/amps-emulator/bin/python install --no-compile -r /tmp/requirements.txt \
 && find /opt/amps-emulator -name '*.so' -exec strip --strip-unneeded {} + \
 && python3 -m compileall -q -j 0 /opt/amps-emulator/lib

# The server's own wheel (with its compiled hot path), installed into /app/opt/amps-emulator so
# that the final stage copies it as a layer of its own on top of the dependencies.
FROM build AS app
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY amps_emulator ./amps_emulator
RUN pip wheel --no-deps --no-build-isolation -w /wheels . \
 && pip --python /opt/amps-emulator/bin/python install --no-deps --no-compile --root /app /wheels/*.whl \
 && find /app -name '*.so' -exec strip --strip-unneeded {} + \
 && python3 -m compileall -q -j 0 -s /app -p / /app/opt/amps-emulator/lib

FROM base
RUN useradd --system --uid 10001 --user-group --home-dir /data --no-create-home amps \
 && mkdir /data /docker-entrypoint-init.d && chown amps:amps /data
# the dependencies, then the server: a source change rebuilds and ships only the last layer
COPY --from=build /opt/amps-emulator /opt/amps-emulator
COPY --from=app /app/ /
ENV PATH=/opt/amps-emulator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1

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
