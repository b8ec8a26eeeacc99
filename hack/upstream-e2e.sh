#!/usr/bin/env bash
# hack/upstream-e2e.sh — build upstream Kubernetes' own e2e specs for
# container restart rules (KEP-5307) and RestartAllContainers (KEP-5532),
# test/e2e/common/node/container_restart_policy.go of k8s.io/kubernetes, as a
# test binary, from the Go module proxy, and cache it outside the repo.
#
# Why: test/e2e's TestUpstreamSpecs (upstream_test.go, `make upstream-e2e`)
# runs those specs as written against the harness's cluster, natively and
# supervised. Upstream's e2e.test links every SIG's specs; this binary links
# only the node specs of test/e2e/common/node, through upstream's own
# RunE2ETests and framework flags, so that it builds in minutes.
#
# Usage:
#   dir=$(hack/upstream-e2e.sh | tail -1)
#   "$dir/e2e-node-specs.test" --help
#
# The last line on stdout is the directory of e2e-node-specs.test; progress
# goes to stderr. A binary built by this same script for the same release is
# kept (its stamp is the script's sha256).
#
# Environment:
#   KUBE_VERSION         k8s.io/kubernetes version (default v1.37.2)
#   UPSTREAM_E2E_DIR     output dir (default
#                        $HOME/.cache/restart-supervisor/upstream-e2e-$KUBE_VERSION)
#
# The scratch module lives in a temp dir; the repo's go.mod is never touched.
# Built with CGO_ENABLED=0, GOWORK=off, GOFLAGS=-mod=mod, as
# hack/kube-binaries.sh builds the cluster's binaries.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
OUT_DIR="${UPSTREAM_E2E_DIR:-${HOME}/.cache/restart-supervisor/upstream-e2e-${KUBE_VERSION}}"
BIN=e2e-node-specs.test

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init upstream-e2e

case "${1:-}" in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
"") ;;
*) die "no arguments expected (got $*)" ;;
esac

[[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "KUBE_VERSION must look like v1.N.M, got $KUBE_VERSION"
KUBE_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"

cache_lock "$OUT_DIR"

stamp="$(sha256sum "$0" | cut -d' ' -f1) $KUBE_VERSION"
if [[ -x "$OUT_DIR/$BIN" && -f "$OUT_DIR/.stamp" && "$(cat "$OUT_DIR/.stamp")" == "$stamp" ]]; then
	log "$BIN: cached ($KUBE_VERSION, $(du -h "$OUT_DIR/$BIN" | cut -f1))"
	echo "$OUT_DIR"
	exit 0
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/upstream-e2e.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOWORK=off
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod"
start=$SECONDS

# The staging modules the release's go.mod replaces with ./staging/src/k8s.io/X,
# each redone as a versioned replace (hack/kube-binaries.sh does the same).
gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
[[ -n $gomod && -r $gomod ]] || die "go mod download k8s.io/kubernetes@$KUBE_VERSION gave no go.mod"
mapfile -t staging < <(sed -n 's#^[[:space:]]*k8s\.io/\([a-z0-9-]*\) => \./staging/src/k8s\.io/.*#\1#p' "$gomod" | sort -u)
[[ ${#staging[@]} -gt 0 ]] || die "no staging replaces in $gomod"

dir="$work/upstreamnode"
mkdir -p "$dir"
{
	echo 'module upstream-e2e/upstreamnode'
	echo
	echo 'go 1.24'
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	echo 'replace ('
	for m in "${staging[@]}"; do
		echo "	k8s.io/$m => k8s.io/$m $STAGING_VERSION"
	done
	echo ')'
} >"$dir/go.mod"

cat >"$dir/doc.go" <<'EOF'
// Package upstreamnode runs upstream's test/e2e/common/node specs through
// upstream's RunE2ETests (see upstream_test.go).
package upstreamnode
EOF

# The driver: upstream test/e2e/e2e_test.go's TestMain and TestE2E, with only
# the node specs of test/e2e/common/node and the framework's init packages.
cat >"$dir/upstream_test.go" <<'EOF'
package upstreamnode

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"k8s.io/component-base/version"
	conformancetestdata "k8s.io/kubernetes/test/conformance/testdata"
	"k8s.io/kubernetes/test/e2e"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"
	testfixtures "k8s.io/kubernetes/test/fixtures"

	// define and freeze constants
	_ "k8s.io/kubernetes/test/e2e/feature"

	// test sources: only the node specs of test/e2e/common
	_ "k8s.io/kubernetes/test/e2e/common/node"

	// reconfigure framework
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	var versionFlag bool
	flag.CommandLine.BoolVar(&versionFlag, "version", false, "Displays version information.")

	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()

	if versionFlag {
		fmt.Printf("%s\n", version.Get())
		os.Exit(0)
	}
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s", flag.CommandLine.Args())
		os.Exit(1)
	}

	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	testfiles.AddFileSource(testfixtures.GetTestFixturesFS())
	testfiles.AddFileSource(conformancetestdata.GetConformanceTestdataFS())

	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	e2e.RunE2ETests(t)
}
EOF

log "building $BIN from k8s.io/kubernetes@$KUBE_VERSION (staging $STAGING_VERSION)"
(cd "$dir" && go mod tidy >&2)
ldflags='-s -w'
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$KUBE_MINOR -X $p.gitTreeState=clean"
done
(cd "$dir" && go test -c -trimpath -ldflags "$ldflags" -o "$work/$BIN" . >&2)
"$work/$BIN" --version >/dev/null || die "$BIN does not run"
mv -f "$work/$BIN" "$OUT_DIR/$BIN"
echo "$stamp" >"$OUT_DIR/.stamp"
log "$BIN: built in $((SECONDS - start))s ($(du -h "$OUT_DIR/$BIN" | cut -f1))"
echo "$OUT_DIR"
