#!/usr/bin/env bash
# hack/containerd.sh — build containerd 2 (the daemon, the runc shim and ctr)
# from the Go module proxy and cache it outside the repo, as hack/jobset.sh
# does for JobSet.
#
# Why: the kubelet mounts an OCI image as a volume (ImageVolume, beta and on
# by default in 1.35, GA in 1.36) only on a runtime that implements it:
# containerd 2.1 or newer. Debian bookworm's containerd is 1.6, which the
# real-node harness (test/e2e) otherwise runs; this build is the runtime of
# the image-volume delivery of the supervisor (test/e2e with
# E2E_CONTAINERD_DIR, `make conformance-image`). runc stays Debian's.
#
# Usage:
#   dir=$(hack/containerd.sh | tail -1)
#   "$dir/containerd" --config CONFIG
#   "$dir/containerd-shim-runc-v2"   (found on PATH by containerd: put $dir first)
#   "$dir/ctr"
#
# The last line on stdout is the directory; progress goes to stderr. A build
# that is present and stamped with the expected version is not redone.
#
# Environment:
#   CONTAINERD_VERSION   github.com/containerd/containerd/v2 version (default v2.4.2)
#   CONTAINERD_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/containerd-$CONTAINERD_VERSION)
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
BIN_DIR="${CONTAINERD_BIN_DIR:-${HOME}/.cache/restart-supervisor/containerd-${CONTAINERD_VERSION}}"
MOD=github.com/containerd/containerd/v2

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init containerd

[[ "$CONTAINERD_VERSION" =~ ^v2\.[0-9]+\.[0-9]+$ ]] || die "CONTAINERD_VERSION must look like v2.N.M, got $CONTAINERD_VERSION"

is_ready() {
	[[ -x "$BIN_DIR/containerd" && -x "$BIN_DIR/containerd-shim-runc-v2" && -x "$BIN_DIR/ctr" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$CONTAINERD_VERSION" ]]
}

cache_lock_or_hit "containerd" "$CONTAINERD_VERSION"

cache_workdirs
log "containerd: building $MOD@$CONTAINERD_VERSION"
# In a module of its own that requires only the release (GOWORK off), so
# that the graph is the release's go.mod. Static (CGO off: no btrfs
# snapshotter, which the harness does not use), stamped as the release's
# Makefile does.
cache_module "$MOD" "$CONTAINERD_VERSION" 1.26.0
ldflags="-s -w -X $MOD/version.Version=$CONTAINERD_VERSION -X $MOD/version.Revision=module-proxy"
cache_go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ldflags" -o "$stage/containerd" "$MOD/cmd/containerd"
cache_go build -trimpath -ldflags "$ldflags" -o "$stage/containerd-shim-runc-v2" "$MOD/cmd/containerd-shim-runc-v2"
cache_go build -trimpath -ldflags "$ldflags" -o "$stage/ctr" "$MOD/cmd/ctr"
mv -f "$stage/containerd" "$BIN_DIR/containerd"
mv -f "$stage/containerd-shim-runc-v2" "$BIN_DIR/containerd-shim-runc-v2"
mv -f "$stage/ctr" "$BIN_DIR/ctr"
echo "$CONTAINERD_VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "containerd: built in $((SECONDS - start))s ($("$BIN_DIR/containerd" --version))"

echo "$BIN_DIR"
