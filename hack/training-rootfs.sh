#!/usr/bin/env bash
# Builds, once, a Debian bookworm root filesystem with Debian's python3-torch
# (1.13, CPU, with torch.distributed, gloo and torchrun) as a plain tar, the
# base of the training image: test/e2e's training scenarios wrap it into an
# image for containerd, and `docker import` makes it a Docker image. No
# registry is reachable, so nothing is pulled: mmdebstrap installs the
# packages from the Debian mirror apt already uses. Prints the tar's path as
# the last stdout line.
#
# The tar is cached under the python3-torch version it holds, so a warm
# cache costs one apt-cache look-up. About 1 GB; the first build takes a few
# minutes (most of it downloading and unpacking torch's dependencies).
#
#   TRAINING_ROOTFS_DIR   cache dir (default $HOME/.cache/restart-supervisor/training-rootfs)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "training-rootfs: $*" >&2; }

DIR="${TRAINING_ROOTFS_DIR:-${HOME}/.cache/restart-supervisor/training-rootfs}"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
if ! flock -n 9; then
	log "waiting for another build into $DIR"
	flock 9
fi

command -v mmdebstrap >/dev/null 2>&1 || hack/apt-install.sh mmdebstrap
version=$(apt-cache policy python3-torch | awk '/Candidate:/ {print $2}')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
	version=$(apt-cache policy python3-torch | awk '/Candidate:/ {print $2}')
fi
[ -n "$version" ] && [ "$version" != "(none)" ] || { log "apt knows no python3-torch"; exit 1; }
out="$DIR/bookworm-python3-torch-${version//[^A-Za-z0-9.-]/_}.tar"
if [ -s "$out" ]; then
	log "cached: $out"
	echo "$out"
	exit 0
fi

log "building $out (python3-torch $version)"
start=$(date +%s)
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# --format=tar: the temporary name has no .tar suffix, by which mmdebstrap
# would otherwise choose a directory. essential: dpkg's essential set (a
# shell, coreutils) and what --include needs; no apt, docs, man pages or
# locales in the image.
mmdebstrap --quiet --format=tar --variant=essential --include="python3-torch=$version" \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	bookworm "$tmp" >&2
mv "$tmp" "$out"
trap - EXIT
log "built in $(( $(date +%s) - start )) s, $(du -m "$out" | cut -f1) MB"
echo "$out"
