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

log "gofmt and go vet"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	printf 'gofmt would change:\n%s\n' "$unformatted" >&2
	exit 1
fi
go vet ./...

log "the supervisor binary stays free of Kubernetes and network packages, and of log/slog"
# log/slog: cmd/restart-supervisor writes slog's formats itself (log.go);
# slog would add about 100 kB to a binary whose pages are its resident set.
if go list -deps ./cmd/restart-supervisor | grep -E '^(k8s\.io|net/http|net$|crypto/tls$|google\.golang\.org/grpc|log/slog)'; then
	echo "cmd/restart-supervisor must not depend on the packages above" >&2
	exit 1
fi

log "go test"
# -p 1: the Docker, API-server and kubelet suites each start real daemons;
# running them one at a time keeps a 2-core machine from timing them out.
go test -count=1 -p 1 -timeout 45m ./...

log "fuzzing the config parser, the manifest reader, the rules annotation, the state-volume readers, the admission review and the Compose generator"
# A short -fuzzminimizetime leaves the time to fuzzing: by default each input
# that adds coverage is minimized for up to 60 s (see the Makefile's fuzz).
go test -run='^$' -fuzz='^FuzzParse$' -fuzztime=20s -fuzzminimizetime=2s ./rules
go test -run='^$' -fuzz='^FuzzReadManifests$' -fuzztime=20s -fuzzminimizetime=2s ./injector
go test -run='^$' -fuzz='^FuzzRulesAnnotation$' -fuzztime=10s -fuzzminimizetime=2s ./injector
go test -run='^$' -fuzz='^FuzzStateFiles$' -fuzztime=10s -fuzzminimizetime=2s ./podstate
go test -run='^$' -fuzz='^FuzzAdmissionReview$' -fuzztime=10s -fuzzminimizetime=2s ./webhook
go test -run='^$' -fuzz='^FuzzGenerate$' -fuzztime=10s -fuzzminimizetime=2s ./compose
