#!/usr/bin/env bash
# hack/kuberay.sh — build the KubeRay operator from the Go module proxy and
# cache it outside the repo, as hack/jobset.sh does for JobSet.
#
# Why: the injector derives the pod restartPolicy of a RayCluster's pods
# as KubeRay does (injector/podpolicy.go: Never under autoscaler v2);
# test/apiserver runs the real operator on a real API server and checks that
# the pods it creates from an injected object carry the policy the injector
# wrote into their configuration. No image is pulled, and the repo's go.mod
# never requires KubeRay.
#
# Usage:
#   dir=$(hack/kuberay.sh | tail -1)
#   "$dir/ray-operator" --kubeconfig=KUBECONFIG ...
#   "$dir/crds/"   the release's CustomResourceDefinitions
#
# Environment:
#   KUBERAY_VERSION  github.com/ray-project/kuberay/ray-operator version (default v1.5.0)
#   KUBERAY_BIN_DIR  output dir (default $HOME/.cache/restart-supervisor/kuberay-$VERSION)
set -euo pipefail

VERSION="${KUBERAY_VERSION:-v1.5.0}"
BIN_DIR="${KUBERAY_BIN_DIR:-${HOME}/.cache/restart-supervisor/kuberay-${VERSION}}"
MOD=github.com/ray-project/kuberay/ray-operator

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init kuberay

[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "KUBERAY_VERSION must look like v1.N.M, got $VERSION"

is_ready() {
	[[ -x "$BIN_DIR/ray-operator" && -f "$BIN_DIR/crds/ray.io_rayclusters.yaml" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$VERSION" ]]
}

cache_lock_or_hit "ray-operator" "$VERSION"

cache_workdirs
log "ray-operator: building $MOD@$VERSION"
cache_module "$MOD" "$VERSION" 1.24
cache_go build -trimpath -ldflags "-s -w" -o "$stage/ray-operator" "$MOD"
[[ -x "$stage/ray-operator" ]] || die "the build produced no binary"
cache_crds config/crd/bases 'ray.io_*.yaml'
cache_commit_crds
mv -f "$stage/ray-operator" "$BIN_DIR/ray-operator"
echo "$VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "ray-operator: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/ray-operator" | cut -f1))"

echo "$BIN_DIR"
