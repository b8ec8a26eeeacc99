#!/usr/bin/env bash
# hack/kueue.sh — build the Kueue controller from the Go module proxy and
# cache it outside the repo, as hack/jobset.sh does for JobSet.
#
# Why: the training harness (test/e2e, build tag training) runs a JobSet
# admitted by Kueue with waitForPodsReady on, to show what an in-place
# group restart and JobSet's own recreation each do to the job's
# admission and quota (docs/training.md). No release image is pulled, and
# the repo's go.mod never requires sigs.k8s.io/kueue (it is built in a
# module of its own that requires only the release).
#
# Usage:
#   dir=$(hack/kueue.sh | tail -1)
#   "$dir/kueue" --kubeconfig=KUBECONFIG --config=CONFIG
#   "$dir/crds/"   the release's CustomResourceDefinitions
#   "$dir/webhooks.yaml"   the release's webhook configurations
#
# The last line on stdout is the directory; progress goes to stderr. A build
# that is present and stamped with the expected version is not redone.
#
# Environment:
#   KUEUE_VERSION   sigs.k8s.io/kueue version (default v0.17.0)
#   KUEUE_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/kueue-$KUEUE_VERSION)
set -euo pipefail

KUEUE_VERSION="${KUEUE_VERSION:-v0.17.0}"
BIN_DIR="${KUEUE_BIN_DIR:-${HOME}/.cache/restart-supervisor/kueue-${KUEUE_VERSION}}"
MOD=sigs.k8s.io/kueue

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init kueue

[[ "$KUEUE_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "KUEUE_VERSION must look like v0.N.M, got $KUEUE_VERSION"

is_ready() {
	[[ -x "$BIN_DIR/kueue" && -f "$BIN_DIR/crds/kueue.x-k8s.io_workloads.yaml" && -f "$BIN_DIR/webhooks.yaml" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$KUEUE_VERSION" ]]
}

cache_lock_or_hit "kueue" "$KUEUE_VERSION"

cache_workdirs
log "kueue: building $MOD@$KUEUE_VERSION"
# Stamped as the release's Makefile does (pkg/version).
cache_module "$MOD" "$KUEUE_VERSION" 1.26.0
cache_go build -trimpath -ldflags "-s -w -X $MOD/pkg/version.GitVersion=$KUEUE_VERSION" -o "$stage/kueue" "$MOD/cmd/kueue"
[[ -x "$stage/kueue" ]] || die "the build produced no binary"
cache_crds config/components/crd/bases 'kueue.x-k8s.io_*.yaml'
moddir="$(cache_moddir)"
cp "$moddir/config/components/webhook/manifests.yaml" "$stage/webhooks.yaml"
chmod u+w "$stage/webhooks.yaml"
cache_commit_crds
mv -f "$stage/webhooks.yaml" "$BIN_DIR/webhooks.yaml"
mv -f "$stage/kueue" "$BIN_DIR/kueue"
echo "$KUEUE_VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "kueue: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/kueue" | cut -f1))"

echo "$BIN_DIR"
