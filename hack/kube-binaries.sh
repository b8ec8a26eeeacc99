#!/usr/bin/env bash
# hack/kube-binaries.sh — build real Kubernetes binaries from the Go module
# proxy and cache them outside the repo.
#
# Why: no container registry is reachable here and setup-envtest cannot
# download its tarballs, so tests that need a real etcd / kube-apiserver
# (webhook tests via envtest) or a real kubelet / kube-controller-manager
# (end-to-end tests) get their binaries from this script instead.
#
# Usage:
#   hack/kube-binaries.sh [component...]
#     components: etcd kube-apiserver kubectl kubelet kube-controller-manager
#     kube-scheduler (default: all six)
#
#   dir=$(hack/kube-binaries.sh etcd kube-apiserver | tail -1)
#   KUBEBUILDER_ASSETS=$dir go test ./...
#
# The last line on stdout is the binary directory; progress goes to stderr.
# Components that are already present and report the expected version are
# skipped, so a warm cache costs a few seconds (the version checks).
#
# Environment:
#   KUBE_BIN_DIR   output dir (default $HOME/.cache/restart-supervisor/kube-$KUBE_VERSION)
#   KUBE_VERSION   k8s.io/kubernetes version (default v1.34.4)
#   ETCD_VERSION   go.etcd.io/etcd/server/v3 version (default v3.6.16)
#
# The throwaway wrapper modules live in a temp dir; the repo's go.mod is never
# touched. Everything is built with CGO_ENABLED=0, -trimpath, stripped.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
BIN_DIR="${KUBE_BIN_DIR:-${HOME}/.cache/restart-supervisor/kube-${KUBE_VERSION}}"

ALL_COMPONENTS=(etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler)

# Staging modules of k8s.io/kubernetes: its go.mod replaces each of them with
# ./staging/src/k8s.io/X, which a consumer must redo as a versioned replace.
STAGING_MODULES=(
	api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
	cloud-provider cluster-bootstrap code-generator component-base
	component-helpers controller-manager cri-api cri-client csi-translation-lib
	dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator
	kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
	mount-utils pod-security-admission sample-apiserver sample-cli-plugin
	sample-controller
)

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init kube-binaries

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
}

# --- arguments ---------------------------------------------------------------
requested=()
for arg in "$@"; do
	case "$arg" in
	-h | --help) usage; exit 0 ;;
	etcd | kube-apiserver | kubectl | kubelet | kube-controller-manager | kube-scheduler) requested+=("$arg") ;;
	*) usage; die "unknown component: $arg" ;;
	esac
done
if [[ ${#requested[@]} -eq 0 ]]; then
	requested=("${ALL_COMPONENTS[@]}")
fi

[[ "$KUBE_VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "KUBE_VERSION must look like v1.N.M, got $KUBE_VERSION"
KUBE_MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"


# --- version checks ----------------------------------------------------------
# Prints the component's version line; fails if the binary is missing/broken.
# (No "| head -1": with pipefail, kubectl's second line can die of SIGPIPE.)
version_of() {
	local bin="$BIN_DIR/$1" out
	[[ -x "$bin" ]] || return 1
	case "$1" in
	kubectl) out="$("$bin" version --client 2>/dev/null)" || return 1 ;;
	*) out="$("$bin" --version 2>/dev/null)" || return 1 ;;
	esac
	printf '%s\n' "${out%%$'\n'*}"
}

is_ready() {
	local want out
	case "$1" in
	etcd) want="${ETCD_VERSION#v}" ;;
	*) want="$KUBE_VERSION" ;;
	esac
	out="$(version_of "$1")" || return 1
	[[ "$out" == *"$want"* ]]
}

cache_lock "$BIN_DIR"

missing=()
for c in "${requested[@]}"; do
	if is_ready "$c"; then
		log "$c: cached ($(version_of "$c"))"
	else
		missing+=("$c")
	fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
	echo "$BIN_DIR"
	exit 0
fi

# --- build -------------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/kube-binaries.XXXXXX")"
stage="$(mktemp -d "$BIN_DIR/.stage.XXXXXX")"
trap 'rm -rf "$work" "$stage"' EXIT

export GOWORK=off
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod"

# tools.go keeps the cmd packages (and their deps) in the wrapper's go.mod.
write_tools_go() { # dir pkg...
	local dir="$1"; shift
	{
		echo '//go:build tools'
		echo
		echo 'package tools'
		echo
		echo 'import ('
		local p
		for p in "$@"; do echo "	_ \"$p\""; done
		echo ')'
	} >"$dir/tools.go"
}

build_etcd() {
	local dir="$work/etcd" start=$SECONDS
	mkdir -p "$dir"
	log "etcd: building go.etcd.io/etcd/server/v3@$ETCD_VERSION"
	cat >"$dir/go.mod" <<-EOF
		module kube-binaries/etcd

		go 1.24

		require go.etcd.io/etcd/server/v3 $ETCD_VERSION
	EOF
	write_tools_go "$dir" go.etcd.io/etcd/server/v3
	(cd "$dir" && go mod tidy >&2)
	# The module root is etcd's main package; -o names the binary (else "v3").
	(cd "$dir" && go build -trimpath -ldflags '-s -w' -o "$stage/etcd" go.etcd.io/etcd/server/v3 >&2)
	log "etcd: built in $((SECONDS - start))s"
}

build_kube() { # component...
	local dir="$work/kubernetes" start=$SECONDS c m
	local pkgs=()
	for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	mkdir -p "$dir"
	log "$*: building k8s.io/kubernetes@$KUBE_VERSION (staging $STAGING_VERSION)"
	# Each release may add staging modules (1.36: cri-streaming); take the
	# list from the release's own go.mod, the fixed one above if it cannot
	# be read.
	local gomod listed
	gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" 2>/dev/null | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
	if [[ -n $gomod && -r $gomod ]]; then
		listed="$(sed -n 's#^[[:space:]]*k8s\.io/\([a-z0-9-]*\) => \./staging/src/k8s\.io/.*#\1#p' "$gomod" | sort -u)"
		if [[ -n $listed ]]; then
			mapfile -t STAGING_MODULES <<<"$listed"
		fi
	fi
	{
		echo 'module kube-binaries/kubernetes'
		echo
		echo 'go 1.24'
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo 'replace ('
		for m in "${STAGING_MODULES[@]}"; do
			echo "	k8s.io/$m => k8s.io/$m $STAGING_VERSION"
		done
		echo ')'
	} >"$dir/go.mod"
	write_tools_go "$dir" "${pkgs[@]}"
	(cd "$dir" && go mod tidy >&2)

	# Unstamped binaries report v0.0.0-master+$Format:%H$, which e.g. breaks
	# kubectl apply's version parsing.
	local build_date ldflags p
	build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
	ldflags='-s -w'
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$KUBE_VERSION"
		ldflags+=" -X $p.gitMajor=1"
		ldflags+=" -X $p.gitMinor=$KUBE_MINOR"
		ldflags+=" -X $p.gitTreeState=clean"
		ldflags+=" -X $p.buildDate=$build_date"
	done
	(cd "$dir" && go build -trimpath -ldflags "$ldflags" -o "$stage/" "${pkgs[@]}" >&2)
	log "$*: built in $((SECONDS - start))s"
}

kube_missing=()
for c in "${missing[@]}"; do
	case "$c" in
	etcd) build_etcd ;;
	*) kube_missing+=("$c") ;;
	esac
done
if [[ ${#kube_missing[@]} -gt 0 ]]; then
	build_kube "${kube_missing[@]}"
fi

# Install atomically (same filesystem) first, so one bad binary does not throw
# away the others, then verify each binary runs and reports its version.
for c in "${missing[@]}"; do
	[[ -x "$stage/$c" ]] || die "$c: build produced no binary"
	mv -f "$stage/$c" "$BIN_DIR/$c"
done
for c in "${missing[@]}"; do
	if ! is_ready "$c"; then
		die "$c: built but does not report the expected version: $(version_of "$c" || echo '<failed to run>')"
	fi
	log "$c: ok ($(version_of "$c"), $(du -h "$BIN_DIR/$c" | cut -f1))"
done

echo "$BIN_DIR"
