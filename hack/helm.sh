#!/usr/bin/env bash
# hack/helm.sh — build a real Helm from the Go module proxy and cache it
# outside the repo, as hack/kube-binaries.sh does for Kubernetes.
#
# Why: the chart's tests (test/apiserver) run the real helm lint, template and
# install; no release tarball is downloaded, and the repo's go.mod never
# requires helm.sh modules (go install pkg@version builds Helm with its own
# go.mod).
#
# Usage:
#   dir=$(hack/helm.sh | tail -1)
#   "$dir/helm" version
#
# The last line on stdout is the binary directory; progress goes to stderr. A
# helm that is present and reports the expected version is not rebuilt, so a
# warm cache costs one `helm version`.
#
# Environment:
#   HELM_VERSION   helm.sh/helm/v4 version (default v4.3.2)
#   HELM_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/helm-$HELM_VERSION)
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v4.3.2}"
BIN_DIR="${HELM_BIN_DIR:-${HOME}/.cache/restart-supervisor/helm-${HELM_VERSION}}"

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init helm

[[ "$HELM_VERSION" =~ ^v([0-9]+)\.[0-9]+\.[0-9]+$ ]] || die "HELM_VERSION must look like v4.N.M, got $HELM_VERSION"
HELM_MAJOR="${BASH_REMATCH[1]}"

# `helm version --short` prints e.g. v4.3.2+g0000000 or v4.3.2.
is_ready() {
	local out
	[[ -x "$BIN_DIR/helm" ]] || return 1
	out="$("$BIN_DIR/helm" version --short 2>/dev/null)" || return 1
	[[ "$out" == "$HELM_VERSION" || "$out" == "$HELM_VERSION+"* ]]
}

cache_lock_or_hit "helm" "$HELM_VERSION"

cache_workdirs
mod="helm.sh/helm/v$HELM_MAJOR"
log "helm: building $mod/cmd/helm@$HELM_VERSION"
# Outside any module (a temp dir, GOWORK off), so nothing of this repo's
# go.mod takes part. Stamped as Helm's own Makefile does, else `helm
# version` reports only the minor release.
(
	cd "$work"
	GOWORK=off CGO_ENABLED=0 GOBIN="$stage" go install -trimpath \
		-ldflags "-s -w -X $mod/internal/version.version=$HELM_VERSION -X $mod/internal/version.gitTreeState=clean" \
		"$mod/cmd/helm@$HELM_VERSION" >&2
)
[[ -x "$stage/helm" ]] || die "the build produced no binary"
mv -f "$stage/helm" "$BIN_DIR/helm"
is_ready || die "built, but does not report $HELM_VERSION: $("$BIN_DIR/helm" version --short 2>&1 || true)"
log "helm: built in $((SECONDS - start))s ($("$BIN_DIR/helm" version --short), $(du -h "$BIN_DIR/helm" | cut -f1))"

echo "$BIN_DIR"
