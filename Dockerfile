# sentinel's release image: the binary, git (the git source reads a clone),
# CA certificates (HTTPS to GitLab and the model) and curl (the CI templates
# move the state through the package registry with it). Build it with
# `docker build -t sentinel .`; ci-templates/release.gitlab-ci.yml builds and
# pushes it on every release tag.
#
# The build stage is Debian bullseye, so the binary needs glibc 2.31 or
# later: the same build as the release binaries.
FROM rust:1.89-bullseye AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked \
    && strip target/release/sentinel \
    && target/release/sentinel --version

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/sentinel /usr/local/bin/sentinel
# No ENTRYPOINT: a CI job runs its script in the image's shell. The user
# stays root so a runner's build directory is writable; a cron or systemd
# deployment passes --user.
CMD ["sentinel", "--help"]
