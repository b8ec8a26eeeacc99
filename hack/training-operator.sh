#!/usr/bin/env bash
# hack/training-operator.sh — build the Kubeflow training-operator (v1) from
# the Go module proxy and cache it outside the repo, as hack/jobset.sh does
# for JobSet.
#
# Why: the injector derives the pod restartPolicy of a PyTorchJob's pods
# from its replica specs as this controller does (injector/podpolicy.go);
# test/apiserver runs the real controller on a real API server and checks
# that the pods it creates from an injected job carry the policy the
# injector wrote into their configuration. No image is pulled, and the
# repo's go.mod never requires the operator (it is built in a module of
# its own that requires only the release).
#
# Usage:
#   dir=$(hack/training-operator.sh | tail -1)
#   "$dir/training-operator" --kubeconfig=KUBECONFIG --enable-scheme=pytorchjob ...
#   "$dir/crds/"   the release's CustomResourceDefinitions
#
# The last line on stdout is the directory; progress goes to stderr. A build
# that is present and stamped with the expected version is not redone.
#
# Environment:
#   TRAINING_OPERATOR_VERSION  github.com/kubeflow/training-operator version (default v1.8.1)
#   TRAINING_OPERATOR_BIN_DIR  output dir (default $HOME/.cache/restart-supervisor/training-operator-$VERSION)
set -euo pipefail

VERSION="${TRAINING_OPERATOR_VERSION:-v1.8.1}"
BIN_DIR="${TRAINING_OPERATOR_BIN_DIR:-${HOME}/.cache/restart-supervisor/training-operator-${VERSION}}"
MOD=github.com/kubeflow/training-operator

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init training-operator

[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "TRAINING_OPERATOR_VERSION must look like v1.N.M, got $VERSION"

is_ready() {
	[[ -x "$BIN_DIR/training-operator" && -f "$BIN_DIR/crds/kubeflow.org_pytorchjobs.yaml" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$VERSION" ]]
}

cache_lock_or_hit "training-operator" "$VERSION"

cache_workdirs
log "training-operator: building $MOD@$VERSION"
cache_module "$MOD" "$VERSION" 1.22
cache_go build -trimpath -ldflags "-s -w" -o "$stage/training-operator" "$MOD/cmd/training-operator.v1"
[[ -x "$stage/training-operator" ]] || die "the build produced no binary"
cache_crds manifests/base/crds 'kubeflow.org_*.yaml'
cache_commit_crds
mv -f "$stage/training-operator" "$BIN_DIR/training-operator"
echo "$VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "training-operator: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/training-operator" | cut -f1))"

echo "$BIN_DIR"
