# The refusal-guard proxy with every feature, as a small non-root image:
#   docker build -t refusal-guard .
#   docker run --rm -p 127.0.0.1:8787:8787 refusal-guard --simulate
# Multi-stage: the binary is built (release profile, the lock file's
# versions) in the official Rust image, then copied alone into distroless's
# glibc base, which has CA certificates and no shell. The base images are
# arguments so that a build can name mirrors of them.
ARG RUST_IMAGE=docker.io/library/rust:1-slim-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# The Cargo profile the binary is built with: `release` for an image to
# run; CI's check of this file builds `image-check` (release without
# whole-program optimisation), which builds in a fraction of the time.
ARG PROFILE=release

FROM ${RUST_IMAGE} AS build
ARG PROFILE
WORKDIR /src
COPY . .
RUN cargo build --profile "${PROFILE}" --locked -p refusal-guard-proxy --all-features --bin refusal-guard \
    && install -D -m 0755 "target/${PROFILE}/refusal-guard" /out/refusal-guard

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/refusal-guard /usr/local/bin/refusal-guard
# distroless's `nonroot` user; no write access anywhere but what is mounted.
USER 65532:65532
# Listen beyond the container's loopback: the API on 8787, the admin
# listener (/metrics, /healthz, /readyz, dashboard) on 9787. No refusal log
# unless REFUSAL_GUARD_LOG names a writable path.
ENV REFUSAL_GUARD_LISTEN=0.0.0.0:8787 \
    REFUSAL_GUARD_ADMIN=0.0.0.0:9787 \
    REFUSAL_GUARD_LOG=off
EXPOSE 8787 9787
ENTRYPOINT ["/usr/local/bin/refusal-guard"]
