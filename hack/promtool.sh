#!/usr/bin/env bash
# hack/promtool.sh — build Prometheus' promtool from the Go module proxy and
# cache it outside the repo, as hack/helm.sh does for Helm.
#
# Why: `make rules-test` runs `promtool check rules` and `promtool test rules`
# on the shipped alerts; no release tarball is downloaded, and the repo's
# go.mod never requires Prometheus (go install pkg@version builds it with its
# own go.mod). Prometheus 3.x publishes its Go module as v0.3XX.Y (3.XX.Y).
#
# Usage:
#   dir=$(hack/promtool.sh | tail -1)
#   "$dir/promtool" --version
#
# The last line on stdout is the binary directory; progress goes to stderr. A
# promtool that is present and reports the expected version is not rebuilt.
#
# Environment:
#   PROMETHEUS_VERSION  github.com/prometheus/prometheus module version (default v0.316.0)
#   PROMTOOL_BIN_DIR    output dir (default $HOME/.cache/restart-supervisor/promtool-$PROMETHEUS_VERSION)
set -euo pipefail

PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
BIN_DIR="${PROMTOOL_BIN_DIR:-${HOME}/.cache/restart-supervisor/promtool-${PROMETHEUS_VERSION}}"

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init promtool

[[ "$PROMETHEUS_VERSION" =~ ^v0\.([0-9]+)\.([0-9]+)$ ]] || die "PROMETHEUS_VERSION must look like v0.3NN.M, got $PROMETHEUS_VERSION"
# v0.316.0 is Prometheus 3.16.0.
RELEASE="$(( BASH_REMATCH[1] / 100 )).$(( BASH_REMATCH[1] % 100 )).${BASH_REMATCH[2]}"

is_ready() {
	[[ -x "$BIN_DIR/promtool" ]] || return 1
	"$BIN_DIR/promtool" --version 2>&1 | grep -q "version $RELEASE"
}

cache_lock_or_hit "promtool" "$RELEASE"

cache_workdirs
mod="github.com/prometheus/prometheus"
log "promtool: building $mod/cmd/promtool@$PROMETHEUS_VERSION (cold: 24 min here, 2 cores at load 10-15)"
# Stamped as Prometheus' own build (promu) does, else --version is empty.
(
	cd "$work"
	GOWORK=off CGO_ENABLED=0 GOBIN="$stage" go install -trimpath \
		-ldflags "-s -w -X github.com/prometheus/common/version.Version=$RELEASE" \
		"$mod/cmd/promtool@$PROMETHEUS_VERSION" >&2
)
[[ -x "$stage/promtool" ]] || die "the build produced no binary"
mv -f "$stage/promtool" "$BIN_DIR/promtool"
is_ready || die "built, but does not report $RELEASE: $("$BIN_DIR/promtool" --version 2>&1 | head -1 || true)"
log "promtool: built in $((SECONDS - start))s ($RELEASE, $(du -h "$BIN_DIR/promtool" | cut -f1))"

echo "$BIN_DIR"
