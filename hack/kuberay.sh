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

log() { printf '[kuberay] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "KUBERAY_VERSION must look like v1.N.M, got $VERSION"
command -v go >/dev/null || die "go not found in PATH"

is_ready() {
	[[ -x "$BIN_DIR/ray-operator" && -f "$BIN_DIR/crds/ray.io_rayclusters.yaml" ]] || return 1
	[[ "$(cat "$BIN_DIR/VERSION" 2>/dev/null)" == "$VERSION" ]]
}

mkdir -p "$BIN_DIR"
if command -v flock >/dev/null; then
	exec 9>"$BIN_DIR/.lock"
	if ! flock -n 9; then
		log "waiting for another build into $BIN_DIR"
		flock 9
	fi
fi

if is_ready; then
	log "ray-operator: cached ($VERSION)"
	echo "$BIN_DIR"
	exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/kuberay-build.XXXXXX")"
stage="$(mktemp -d "$BIN_DIR/.stage.XXXXXX")"
trap 'rm -rf "$work" "$stage"' EXIT

start=$SECONDS
log "ray-operator: building $MOD@$VERSION"
(
	cd "$work"
	export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
	cat >go.mod <<-EOM
		module restart-supervisor-kuberay

		go 1.24

		require $MOD $VERSION
	EOM
	go build -trimpath -ldflags "-s -w" -o "$stage/ray-operator" "$MOD" >&2
)
[[ -x "$stage/ray-operator" ]] || die "the build produced no binary"
moddir="$(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$MOD")"
[[ -f "$moddir/config/crd/bases/ray.io_rayclusters.yaml" ]] || die "no CRD in $moddir"
mkdir -p "$stage/crds"
cp "$moddir"/config/crd/bases/ray.io_*.yaml "$stage/crds/"
chmod u+w "$stage/crds"/*.yaml
rm -rf "$BIN_DIR/crds"
mv "$stage/crds" "$BIN_DIR/crds"
mv -f "$stage/ray-operator" "$BIN_DIR/ray-operator"
echo "$VERSION" >"$BIN_DIR/VERSION"
is_ready || die "built, but the cache is incomplete"
log "ray-operator: built in $((SECONDS - start))s ($(du -h "$BIN_DIR/ray-operator" | cut -f1))"

echo "$BIN_DIR"
