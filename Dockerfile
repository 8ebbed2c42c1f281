# Dockerfile: attnd in two stages. The build stage runs the project's own
# `make deps` and `make all` on Debian 12, so the image is compiled with the
# same package versions and flags as CI; the runtime stage carries only the
# shared libraries the binary links and the binary itself (the dashboard is
# embedded in it).
#
#   docker build -t attnd .
#   docker run --rm -p 8080:8080 --cpus 2 attnd
#
# Configuration is only through environment variables (docs/deploy.md lists
# them all); the entry point takes no arguments.

FROM debian:bookworm AS build

# make is the one package installed by hand: `make deps` installs the rest
# from the Makefile's DEB_PACKAGES, the list CI installs.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src

# The package list lives in the Makefile and its fragments only, so this layer
# is rebuilt when they change and cached while only the sources do.
COPY Makefile ./
COPY mk/ mk/
RUN make deps \
    && rm -rf /var/lib/apt/lists/*

COPY . .
RUN make all

FROM debian:bookworm-slim AS runtime

# Runtime libraries of build/attnd, one package per shared object it links
# (tests/deploy checks this list against `ldd build/attnd`). A fixed numeric
# user so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        libmicrohttpd12 \
        libopenblas0-pthread \
        libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 attnd \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin attnd

COPY --from=build /src/build/attnd /usr/local/bin/attnd

# OpenBLAS reads OPENBLAS_NUM_THREADS once, when it loads: the daemon runs
# its own compute pool, one worker per CPU of the container's limit (read from
# the cgroup's cpu.max, or ATTND_THREADS), so each BLAS call stays on one
# thread and the two never oversubscribe the cores.
ENV PORT=8080 \
    OPENBLAS_NUM_THREADS=1

USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM

# attnd --healthcheck GETs /healthz on the local server (same PORT) and exits
# 0 or 1, so the image needs no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/usr/local/bin/attnd", "--healthcheck"]

ENTRYPOINT ["/usr/local/bin/attnd"]
