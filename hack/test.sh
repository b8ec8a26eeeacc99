#!/usr/bin/env bash
# Runs every test of the project on this machine. The setup scripts of the
# end-to-end suites install what they need (Debian packages through
# hack/apt-install.sh, Kubernetes binaries, Helm, cert-manager and JobSet built from
# the Go module proxy into ~/.cache) and start the Docker engine; then come the Go tests, including the
# suites against real Docker, a real kube-apiserver and a real kubelet, and
# short fuzz runs. Needs root (PID namespaces, Docker, kubelet).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '== %s\n' "$*" >&2; }

log "starting the Docker engine"
bash test/docker/setup.sh

log "installing zsh and fish when missing, for cmd/restart-injector's TestCompletionScripts"
shells=()
command -v zsh >/dev/null 2>&1 || shells+=(zsh)
command -v fish >/dev/null 2>&1 || shells+=(fish)
hack/apt-install.sh "${shells[@]}"

log "installing Debian's python3-torch when missing (about 150 MB, 35 s cold), for test/training's real PyTorch ranks"
dpkg -s python3-torch >/dev/null 2>&1 || hack/apt-install.sh python3-torch

log "installing the end-to-end cluster's packages and building Kubernetes binaries (cached)"
test/e2e/setup.sh >/dev/null

log "building the newest release's etcd and kube-apiserver (v1.37.2, cached) for the validation and native-detection tests"
# test/apiserver compares the project's validation and --native=auto's
# per-feature decision with the default release (v1.34.4) and with each of
# KUBE_VALIDATION_VERSIONS; the newest release is always among them.
KUBE_VERSION=v1.37.2 hack/kube-binaries.sh etcd kube-apiserver >/dev/null
export KUBE_VALIDATION_VERSIONS="${KUBE_VALIDATION_VERSIONS-v1.37.2}"

log "building Helm from the Go module proxy for the chart's tests (cached)"
hack/helm.sh >/dev/null

log "building cert-manager's controller and cainjector from the Go module proxy for the cert-manager install test (cached)"
hack/cert-manager.sh >/dev/null

log "building the JobSet controller from the Go module proxy for the JobSet row of the conformance table (cached)"
hack/jobset.sh >/dev/null

log "unpacking Debian's promtool (cached), for the alerts' promtool tests"
PROMTOOL="$(hack/promtool-debian.sh | tail -1)/promtool"
export PROMTOOL

log "make check: gofmt, the supervisor's dependency graph, every fuzz target listed"
make check

log "make rules-test: promtool check rules and test rules on the shipped alerts, and the dashboard's queries through promtool's parser"
make rules-test PROMTOOL="$PROMTOOL"

log "make lint: go vet, staticcheck and depguard's import rules of ARCHITECTURE.md (golangci-lint, pinned, built on first use)"
make lint

log "go test"
# -p 1: the Docker, API-server and kubelet suites each start real daemons;
# running them one at a time keeps a 2-core machine from timing them out.
go test -count=1 -p 1 -timeout 45m ./...

log "make fuzz: every fuzz target of the Makefile's FUZZ_TARGETS"
make fuzz
