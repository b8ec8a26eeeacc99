#!/usr/bin/env bash
# hack/cosign.sh — build sigstore's cosign from the Go module proxy and cache
# it outside the repo, as hack/promtool.sh does for promtool.
#
# Why: `make release-verify` signs what `make release` made with a local
# key and verifies every signature and SBOM attestation the way a user
# verifies a release (docs/install.md), against a registry on loopback; no
# release binary is downloaded, and the repo's go.mod never requires cosign
# (it is built in a module of its own that requires only the release).
#
# Usage:
#   dir=$(hack/cosign.sh | tail -1)
#   "$dir/cosign" version
#
# The last line on stdout is the binary directory; progress goes to stderr. A
# build that is present and stamped with the expected version is not redone.
#
# Environment:
#   COSIGN_VERSION   github.com/sigstore/cosign/v2 version (default v2.6.5)
#   COSIGN_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/cosign-$COSIGN_VERSION)
set -euo pipefail

COSIGN_VERSION="${COSIGN_VERSION:-v2.6.5}"
BIN_DIR="${COSIGN_BIN_DIR:-${HOME}/.cache/restart-supervisor/cosign-${COSIGN_VERSION}}"
MOD=github.com/sigstore/cosign/v2

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init cosign

[[ "$COSIGN_VERSION" =~ ^v2\.[0-9]+\.[0-9]+$ ]] || die "COSIGN_VERSION must look like v2.N.M, got $COSIGN_VERSION"

is_ready() {
	[[ -x "$BIN_DIR/cosign" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$COSIGN_VERSION" ]]
}

cache_lock_or_hit "cosign" "$COSIGN_VERSION"

cache_workdirs
log "cosign: building $MOD/cmd/cosign@$COSIGN_VERSION"
# Stamped as cosign's own Makefile does (sigs.k8s.io/release-utils).
cache_module "$MOD" "$COSIGN_VERSION" 1.26.0
cache_go build -trimpath -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" -o "$stage/cosign" "$MOD/cmd/cosign"
[[ -x "$stage/cosign" ]] || die "the build produced no binary"
mv -f "$stage/cosign" "$BIN_DIR/cosign"
echo "$COSIGN_VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "cosign: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/cosign" | cut -f1))"

echo "$BIN_DIR"
