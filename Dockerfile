# syntax=docker/dockerfile:1
#
# outbox-relay: a static binary on distroless (no shell, CA certificates,
# uid 65532). The binary is built by .ci/build, the same script CI runs, so
# the image and CI cannot disagree on flags.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t outbox-relay .

# The builder runs on the build machine's platform and cross-compiles
# (CGO_ENABLED=0) for the target platform: multi-arch builds need no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION is stamped into the binary (outbox-relay version); the build
# context has no .git, so .ci/build cannot ask git describe here.
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH VERSION=$VERSION .ci/build /out/outbox-relay

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.description="Transactional outbox relay: PostgreSQL to NATS JetStream, at least once" \
      org.opencontainers.image.source="https://github.com/outbox-relay/outbox-relay" \
      org.opencontainers.image.url="https://github.com/outbox-relay/outbox-relay" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /out/outbox-relay /outbox-relay
# distroless's nonroot user, spelled out so that runtimes that check for a
# numeric non-root user (Kubernetes runAsNonRoot) accept the image.
USER 65532:65532
# /metrics, /livez and /readyz (RELAY_HTTP_ADDR, default :8461).
EXPOSE 8461
# Exec form: the image has no shell. healthcheck probes /readyz on
# RELAY_HTTP_ADDR from the container's own environment.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["/outbox-relay", "healthcheck"]
ENTRYPOINT ["/outbox-relay"]
CMD ["run"]
