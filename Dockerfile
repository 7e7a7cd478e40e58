# amps-emulator: an AMPS-compatible message server for development and CI.
#   docker build -t amps-emulator .
#   docker run --rm -p 9007:9007 amps-emulator                       # built-in default config
#   docker run --rm -p 9007:9007 -v $PWD/amps.xml:/etc/amps.xml amps-emulator /etc/amps.xml
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY amps_emulator ./amps_emulator
COPY server ./server
COPY protocol ./protocol
COPY journal ./journal
COPY sow ./sow
COPY queues ./queues
COPY config ./config
RUN pip install --no-cache-dir . && mkdir -p /data
WORKDIR /data
EXPOSE 9007
# The default config listens on 127.0.0.1; in a container, listen on every interface.
ENTRYPOINT ["amps-emulator"]
CMD ["--listen", "0.0.0.0:9007"]
