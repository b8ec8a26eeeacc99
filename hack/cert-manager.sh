#!/usr/bin/env bash
# hack/cert-manager.sh — build cert-manager's controller and cainjector from
# the Go module proxy and cache them outside the repo, as hack/helm.sh does
# for Helm.
#
# Why: test/apiserver runs the real cert-manager against a real kube-apiserver
# to issue, inject and renew the webhook's certificate of deploy/ (the
# default install). No release image or tarball is downloaded, and the repo's
# go.mod never requires cert-manager modules.
#
# The release's cmd/controller and cmd/cainjector are Go modules of their own
# (github.com/cert-manager/cert-manager/controller-binary, ...) that the module
# proxy does not serve, so the binaries are built from small main packages in
# hack/cert-manager/ (build tag certmanager) linked against the release module
# github.com/cert-manager/cert-manager: the same control loops, CA injector
# and issuers, without leader election, with only the CA and self-signed
# issuers compiled in.
#
# Usage:
#   dir=$(hack/cert-manager.sh | tail -1)
#   "$dir/controller" --kubeconfig=KUBECONFIG
#   "$dir/cainjector" --kubeconfig=KUBECONFIG
#   "$dir/crds/"      the release's CustomResourceDefinitions (deploy/crds)
#
# The last line on stdout is the binary directory; progress goes to stderr.
# Binaries that are present and report the expected version are not rebuilt,
# so a warm cache costs two `--version` runs.
#
# Environment:
#   CERT_MANAGER_VERSION   github.com/cert-manager/cert-manager version (default v1.20.2)
#   CERT_MANAGER_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/cert-manager-$CERT_MANAGER_VERSION)
#   CERT_MANAGER_BUILD_P   go build -p (default 2)
set -euo pipefail

CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.20.2}"
BIN_DIR="${CERT_MANAGER_BIN_DIR:-${HOME}/.cache/restart-supervisor/cert-manager-${CERT_MANAGER_VERSION}}"
BUILD_P="${CERT_MANAGER_BUILD_P:-2}"
MOD=github.com/cert-manager/cert-manager
SRC="$(cd "$(dirname "$0")" && pwd)/cert-manager"

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init cert-manager

[[ "$CERT_MANAGER_VERSION" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "CERT_MANAGER_VERSION must look like v1.N.M, got $CERT_MANAGER_VERSION"
[[ -f "$SRC/controller/main.go" && -f "$SRC/cainjector/main.go" ]] || die "missing $SRC/{controller,cainjector}/main.go"

# `controller --version` prints "cert-manager controller v1.20.2".
is_ready() {
	local c out
	for c in controller cainjector; do
		[[ -x "$BIN_DIR/$c" ]] || return 1
		out="$("$BIN_DIR/$c" --version 2>/dev/null)" || return 1
		[[ "$out" == "cert-manager $c $CERT_MANAGER_VERSION" ]] || return 1
	done
	[[ -f "$BIN_DIR/crds/cert-manager.io_certificates.yaml" ]]
}

cache_lock_or_hit "controller, cainjector" "$CERT_MANAGER_VERSION"

cache_workdirs
log "building controller and cainjector against $MOD@$CERT_MANAGER_VERSION"
export GOWORK=off CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod"
mkdir -p "$work/cmd/controller" "$work/cmd/cainjector"
cp "$SRC/controller/main.go" "$work/cmd/controller/"
cp "$SRC/cainjector/main.go" "$work/cmd/cainjector/"
cat >"$work/go.mod" <<-EOM
	module restart-supervisor-cert-manager

	go 1.25.0

	require $MOD $CERT_MANAGER_VERSION
EOM
# tidy resolves the rest of the graph from the release's own go.mod, so the
# Kubernetes and controller-runtime versions are the release's.
(cd "$work" && go mod tidy >&2)
got="$(cd "$work" && go list -m -f '{{.Version}}' "$MOD")"
[[ "$got" == "$CERT_MANAGER_VERSION" ]] || die "resolved $MOD@$got, wanted $CERT_MANAGER_VERSION"
(
	cd "$work"
	go build -p "$BUILD_P" -tags certmanager -trimpath \
		-ldflags "-s -w -X $MOD/pkg/util.AppVersion=$CERT_MANAGER_VERSION" \
		-o "$stage/" ./cmd/controller ./cmd/cainjector >&2
)
# The CustomResourceDefinitions of the same release, from the module zip.
moddir="$(cd "$work" && go list -m -f '{{.Dir}}' "$MOD")"
mkdir -p "$stage/crds"
cp "$moddir"/deploy/crds/*.yaml "$stage/crds/"
rm -f "$stage/crds/README.md"
chmod u+w "$stage/crds"/*.yaml

for c in controller cainjector; do
	[[ -x "$stage/$c" ]] || die "$c: the build produced no binary"
done
rm -rf "$BIN_DIR/crds"
mv "$stage/crds" "$BIN_DIR/crds"
mv -f "$stage/controller" "$stage/cainjector" "$BIN_DIR/"
is_ready || die "built, but does not report $CERT_MANAGER_VERSION: $("$BIN_DIR/controller" --version 2>&1 || true); $("$BIN_DIR/cainjector" --version 2>&1 || true)"
log "controller, cainjector: built in $((SECONDS - start))s ($CERT_MANAGER_VERSION; $(du -h "$BIN_DIR/controller" | cut -f1), $(du -h "$BIN_DIR/cainjector" | cut -f1))"

echo "$BIN_DIR"
