#!/usr/bin/env bash
# Runs every test of the project on this machine: installs what the tests
# need (Debian packages, Kubernetes binaries built from the Go module proxy
# into ~/.cache), starts the Docker engine, then runs the Go tests, including
# the end-to-end suites against real Docker, a real kube-apiserver and a real
# kubelet, and a short fuzz run. Needs root (PID namespaces, Docker, kubelet).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*" >&2; }

packages=(docker.io tini dumb-init busybox-static containerd runc containernetworking-plugins iproute2 procps util-linux)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

log "starting the Docker engine"
bash test/docker/setup.sh

log "building Kubernetes binaries (cached)"
hack/kube-binaries.sh >/dev/null

log "gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	printf 'gofmt would change:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...

log "the supervisor binary stays free of Kubernetes and network packages"
if go list -deps ./cmd/restart-supervisor | grep -E '^(k8s\.io|net/http|net$)'; then
	echo "cmd/restart-supervisor must not depend on the packages above" >&2
	exit 1
fi

log "go test"
# -p 1: the Docker, API-server and kubelet suites each start real daemons;
# running them one at a time keeps a 2-core machine from timing them out.
go test -count=1 -p 1 -timeout 45m ./...

log "fuzzing the config parser"
go test -run='^$' -fuzz=FuzzParse -fuzztime=20s ./rules
