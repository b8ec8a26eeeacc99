#!/usr/bin/env bash
# hack/jobset.sh — build the JobSet controller from the Go module proxy and
# cache it outside the repo, as hack/helm.sh does for Helm.
#
# Why: the real-node harness (test/e2e) runs a JobSet through its own
# controller, the way training users run it, in both modes: natively and
# through the webhook's template entry. No release image is pulled, and the
# repo's go.mod never requires sigs.k8s.io/jobset (it is built in a module
# of its own that requires only the release).
#
# Usage:
#   dir=$(hack/jobset.sh | tail -1)
#   "$dir/jobset" --kubeconfig=KUBECONFIG --config=CONFIG
#   "$dir/crds/"   the release's CustomResourceDefinition
#   "$dir/webhooks.yaml"   the release's webhook configurations
#
# The last line on stdout is the directory; progress goes to stderr. A build
# that is present and stamped with the expected version is not redone.
#
# Environment:
#   JOBSET_VERSION   sigs.k8s.io/jobset version (default v0.12.0; the module
#                    proxy serves it by exact version even where it refuses
#                    the module's version list)
#   JOBSET_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/jobset-$JOBSET_VERSION)
set -euo pipefail

JOBSET_VERSION="${JOBSET_VERSION:-v0.12.0}"
BIN_DIR="${JOBSET_BIN_DIR:-${HOME}/.cache/restart-supervisor/jobset-${JOBSET_VERSION}}"
MOD=sigs.k8s.io/jobset

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init jobset

[[ "$JOBSET_VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "JOBSET_VERSION must look like v0.N.M, got $JOBSET_VERSION"

is_ready() {
	[[ -x "$BIN_DIR/jobset" && -f "$BIN_DIR/crds/jobset.x-k8s.io_jobsets.yaml" && -f "$BIN_DIR/webhooks.yaml" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$JOBSET_VERSION" ]]
}

cache_lock_or_hit "jobset" "$JOBSET_VERSION"

cache_workdirs
log "jobset: building $MOD@$JOBSET_VERSION"
# In a module of its own (a temp dir, GOWORK off) that requires only the
# release, so nothing of this repo's go.mod takes part and the rest of the
# graph is the release's own go.mod. Not `go install pkg@version`: that
# reads the module's version list for deprecations, which the module proxy
# refuses for this module. Stamped as the release's Makefile does.
cache_module "$MOD" "$JOBSET_VERSION" 1.26.0
cache_go build -trimpath -ldflags "-s -w -X $MOD/pkg/version.GitVersion=$JOBSET_VERSION" -o "$stage/jobset" "$MOD"
[[ -x "$stage/jobset" ]] || die "the build produced no binary"
# The CustomResourceDefinition of the same release, from the module zip.
cache_crds config/components/crd/bases jobset.x-k8s.io_jobsets.yaml
moddir="$(cache_moddir)"
# Its webhook configurations as the release generates them (the harness
# points them at the controller and scopes the pod webhooks as the
# release's kustomize patches do).
cp "$moddir/config/components/webhook/manifests.yaml" "$stage/webhooks.yaml"
chmod u+w "$stage/webhooks.yaml"
cache_commit_crds
mv -f "$stage/webhooks.yaml" "$BIN_DIR/webhooks.yaml"
mv -f "$stage/jobset" "$BIN_DIR/jobset"
echo "$JOBSET_VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "jobset: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/jobset" | cut -f1))"

echo "$BIN_DIR"
