#!/usr/bin/env bash
# A stand-in for the Dockerfile's base image, python:3.11-slim-bookworm, made from Debian's own
# packages: for building the image where Docker Hub cannot be reached but a Debian mirror can.
#
#   sudo scripts/base_image.sh                                # tags karpweb/python:3.11-bookworm
#   sudo scripts/base_image.sh my.registry/python:3.11-bookworm
#   make image PYTHON_IMAGE=karpweb/python:3.11-bookworm     # the image, on it
#
# Debian bookworm (minbase) with its python3 (3.11), venv and ca-certificates, security updates
# applied, documentation left out as in Debian's slim images; `python` is python3. The Dockerfile
# uses only what both images have: python, python -m venv, groupadd/useradd, install.
# Needs root (debootstrap), debootstrap and a Docker engine. Environment: MIRROR, SECURITY_MIRROR.
set -euo pipefail

TAG="${1:-karpweb/python:3.11-bookworm}"
SUITE=bookworm
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
DOCKER="${DOCKER:-docker}"

die() { echo "base_image.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
"$DOCKER" version --format '{{.Server.Version}}' >/dev/null || die "no Docker engine answers"

ROOTFS="$(mktemp -d "${TMPDIR:-/tmp}/karpweb-base.XXXXXX")"
cleanup() {
  umount "$ROOTFS/proc" 2>/dev/null || true
  rm -rf --one-file-system "$ROOTFS"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
  "$SUITE" "$ROOTFS" "$MIRROR"

# What Debian's slim images leave out, here and in whatever a derived image installs later.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
# Never start services while building an image.
printf '#!/bin/sh\nexit 101\n' >"$ROOTFS/usr/sbin/policy-rc.d"
chmod 0755 "$ROOTFS/usr/sbin/policy-rc.d"

# The security and point-release updates debootstrap does not fetch.
cat >"$ROOTFS/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mount -t proc proc "$ROOTFS/proc"
chroot "$ROOTFS" env DEBIAN_FRONTEND=noninteractive sh -c \
  'apt-get -o APT::Sandbox::User=root update -qq && apt-get -o APT::Sandbox::User=root upgrade -y -qq && apt-get clean'
umount "$ROOTFS/proc"

# Nothing of this machine or of the build in the image: the engine provides resolv.conf and
# hostname at run time.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/var/log/* \
  "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
  "$ROOTFS"/tmp/* "$ROOTFS"/root/.cache
find "$ROOTFS/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
: >"$ROOTFS/etc/resolv.conf"
: >"$ROOTFS/etc/hostname"

# `docker import` makes an image with no configuration: give it the official image's essentials.
# PATH must be set, or the Dockerfile's `ENV PATH=/opt/venv/bin:$PATH` would expand to nothing.
tar -C "$ROOTFS" --numeric-owner -c . | "$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'LABEL org.opencontainers.image.description="Debian bookworm python3 (3.11), a stand-in for python:3.11-slim-bookworm (scripts/base_image.sh)"' \
  --change 'CMD ["python3"]' \
  - "$TAG" >/dev/null
echo "$TAG: $("$DOCKER" run --rm --network none "$TAG" python --version 2>&1)," \
  "$("$DOCKER" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')"
