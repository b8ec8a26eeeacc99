VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
# Both binaries, and the images (docker build --build-arg VERSION=...), read
# the version from the one variable the supervisor and injector share.
LDFLAGS := -s -w -X github.com/restart-supervisor/restart-supervisor/contract.Version=$(VERSION)

# Every package but the three suites that start daemons (test/docker: dockerd;
# test/apiserver: etcd + kube-apiserver; test/e2e: containerd + kubelet), which
# only `make test` runs. The few tests left that need root (PID and mount
# namespaces, other UIDs) skip themselves without it, and fail when CI=true.
UNIT_PKGS = $(shell go list ./... | grep -vE '/test/(docker|apiserver|e2e)$$')

# Extra flags for go test in unit and race, e.g. GOTESTFLAGS=-v.
GOTESTFLAGS ?=
# Empty: each fuzz target runs the number of inputs FUZZ_TARGETS gives it
# (about 20 s each on a 2-core machine). A duration (FUZZTIME=5m) runs every
# target that long instead, for exploring by hand: Go 1.26's coordinator can
# fail a duration run at its deadline with a bare "context deadline
# exceeded" and no input written (go.dev/issue/75804, fixed in Go 1.27), so
# `make test` never uses one.
FUZZTIME ?=
# Go minimizes every input that adds coverage for up to 60 s by default, and
# counts no execs meanwhile: on the injector's multi-KB seeds a 20 s run was
# almost all minimization (about 300 execs instead of about 8000).
FUZZMINIMIZETIME ?= 2s
TRAINING_RUNS ?= 5

GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: build images release release-verify push example unit race lint fuzz check test rules-test training podstart gang groupscale controllers conformance conformance-image upstream-e2e bench sweep e2e-up e2e-down clean

build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-supervisor ./cmd/restart-supervisor
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-probe ./cmd/restart-probe
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/restart-injector ./cmd/restart-injector

# The supervisor and injector images (Dockerfile.supervisor's and
# Dockerfile.injector's, FROM scratch) for IMAGE_PLATFORMS as multi-arch OCI
# indexes in the OCI layout bin/images, built by hack/images with
# go-containerregistry: no Docker, no registry. Every timestamp is
# SOURCE_DATE_EPOCH (default: the commit's time), so the same commit and
# toolchain give the same digests. -buildvcs=false: whether go build stamps
# VCS information (GOFLAGS, a checkout it does or does not recognize)
# otherwise changes the binaries' build info, and so the digests; the
# revision label carries the commit.
# Prints each index's digest.
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
CA_BUNDLE ?= /etc/ssl/certs/ca-certificates.crt
# Where the layout and the per-platform binaries go (a test builds into its
# own directory).
IMAGE_LAYOUT ?= bin/images
IMAGE_BIN ?= bin/images-build
images:
	@set -e; for p in $(IMAGE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		for b in restart-supervisor restart-probe restart-injector; do \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(IMAGE_BIN)/$${os}_$$arch/$$b ./cmd/$$b; \
		done; \
	done
	go run ./hack/images build --bin $(IMAGE_BIN) --ca-bundle $(CA_BUNDLE) --version $(VERSION) \
		--revision $(REVISION) --created $(SOURCE_DATE_EPOCH) --platforms $(shell echo $(IMAGE_PLATFORMS) | tr ' ' ,) --out $(IMAGE_LAYOUT)

# A release into DIST, for a tagged commit (or VERSION=vX.Y.Z): the images
# (make images) and their OCI layout as one tar (images.tar, for
# `ctr -n k8s.io images import` or `kind load image-archive` without a
# registry), the CLI archives for RELEASE_PLATFORMS and the supervisor's for
# IMAGE_PLATFORMS, an SPDX document per archive and per image from the
# binaries' build information, the chart with both images pinned by digest
# (helm package, version VERSION without its v), the krew manifest
# (kubectl restarts) and SHA256SUMS. Every file is reproducible from the commit.
# Unsigned here: .github/workflows/release.yaml runs this on a tag, signs the
# images and SHA256SUMS with cosign (keyless) and publishes (docs/install.md).
# On Windows the CLI has every command but node-agent (which reads a
# Linux node's pods directory) and is restart-injector.exe.
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
RELEASE_URL ?= https://github.com/restart-supervisor/restart-supervisor/releases/download/$(VERSION)
DIST ?= dist
RELEASE_BIN ?= bin/release
release: images
	@echo '$(VERSION)' | grep -Eq '^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$' || \
		{ echo "make release: VERSION=$(VERSION) is not vMAJOR.MINOR.PATCH: tag the commit (git tag v0.1.0) or set VERSION" >&2; exit 2; }
	rm -rf $(DIST) $(RELEASE_BIN) && mkdir -p $(DIST)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(RELEASE_BIN)/$${os}_$$arch/restart-injector$$([ $$os = windows ] && echo .exe) ./cmd/restart-injector; \
	done
	@set -e; for p in $(IMAGE_PLATFORMS); do \
		d=$$(echo $$p | tr / _); mkdir -p $(RELEASE_BIN)/$$d; \
		cp $(IMAGE_BIN)/$$d/restart-supervisor $(IMAGE_BIN)/$$d/restart-probe $(RELEASE_BIN)/$$d/; \
	done
	go run ./hack/release archives --bin $(RELEASE_BIN) --version $(VERSION) --created $(SOURCE_DATE_EPOCH) --out $(DIST)
	go run ./hack/release layout --layout $(IMAGE_LAYOUT) --created $(SOURCE_DATE_EPOCH) --out $(DIST)/images.tar
	go run ./hack/release krew --dist $(DIST) --version $(VERSION) --url $(RELEASE_URL)
	go run ./hack/release sbom --name "restart-supervisor image $(VERSION)" --version $(VERSION) --created $(SOURCE_DATE_EPOCH) \
		--out $(DIST)/restart-supervisor-image.spdx.json $(wildcard $(IMAGE_BIN)/*/restart-supervisor $(IMAGE_BIN)/*/restart-probe)
	go run ./hack/release sbom --name "restart-injector image $(VERSION)" --version $(VERSION) --created $(SOURCE_DATE_EPOCH) \
		--out $(DIST)/restart-injector-image.spdx.json $(wildcard $(IMAGE_BIN)/*/restart-injector)
	go run ./hack/release chart --chart charts/restart-injector --layout $(IMAGE_LAYOUT) --version $(VERSION) --out $(RELEASE_BIN)/chart
	helm=$$(hack/helm.sh | tail -1)/helm && $$helm package $(RELEASE_BIN)/chart/restart-injector --version $(VERSION:v%=%) --app-version $(VERSION) -d $(DIST)
	go run ./hack/release checksums --dist $(DIST)

# What `make release` wrote, signed as the release workflow signs it but with
# a local key pair, against go-containerregistry's registry on loopback, then
# verified as docs/install.md tells a user to: each image's signature and
# SBOM attestation, the signed SHA256SUMS and every file against it; each
# also refused with another key, unsigned or changed (hack/release
# verify_test.go). In a network namespace of its own with only a loopback,
# so that cosign reaches no transparency log or TUF mirror. Not in `make
# test`: cosign is built from the Go module proxy on first use
# (hack/cosign.sh, cached).
release-verify:
	@test -f $(DIST)/SHA256SUMS || { echo "make release-verify: no $(DIST)/SHA256SUMS: run make release first" >&2; exit 2; }
	@cosign="$$(hack/cosign.sh | tail -1)/cosign" && \
		go test -tags releaseverify -c -o $(RELEASE_BIN)/verify.test ./hack/release && \
		cd hack/release && unshare --net sh -c 'ip link set lo up && exec env COSIGN="$$0" RELEASE_DIST="$$1" "$$2" -test.run TestReleaseVerifies -test.v' \
			"$$cosign" "$(abspath $(DIST))" "$(abspath $(RELEASE_BIN))/verify.test"

# Both indexes of bin/images to $(REGISTRY)/restart-supervisor:VERSION and
# $(REGISTRY)/restart-injector:VERSION, with the credentials of
# ~/.docker/config.json; prints the repo@sha256:... references to pin.
# INSECURE=1: plain HTTP, for a registry on loopback.
REGISTRY ?=
INSECURE ?=
push:
	@[ -n "$(REGISTRY)" ] || { echo "make push: REGISTRY=host/prefix is required" >&2; exit 2; }
	@[ -f $(IMAGE_LAYOUT)/index.json ] || { echo "make push: no $(IMAGE_LAYOUT): run make images first" >&2; exit 2; }
	go run ./hack/images push --layout $(IMAGE_LAYOUT) --registry $(REGISTRY) $(if $(INSECURE),--insecure)

example:
	examples/run.sh

unit:
	go test -count=1 -timeout 5m $(GOTESTFLAGS) $(UNIT_PKGS)

race:
	CGO_ENABLED=1 go test -count=1 -race -timeout 10m $(GOTESTFLAGS) $(UNIT_PKGS)

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	GOBIN=$(CURDIR)/bin/.golangci-lint go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/.golangci-lint/golangci-lint $@
	rmdir bin/.golangci-lint

# Every fuzz target of the module, package:Function:inputs; `make check`
# fails when a Fuzz function is missing here, so none is left out of
# `make fuzz` (and so of `make test`). The counts give each target about 20 s
# here (2 cores, Go 1.26): count budgets have no deadline for the
# coordinator to race (FUZZTIME above).
FUZZ_TARGETS := rules:FuzzParse:250000 manifests:FuzzReadManifests:20000 \
	injector:FuzzRulesAnnotation:80000 statevol:FuzzStateFiles:200000 \
	webhook:FuzzAdmissionReview:40000 compose:FuzzGenerate:90000

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}x; \
		if [ -n "$(FUZZTIME)" ]; then budget=$(FUZZTIME); fi; \
		echo "== fuzz $$name ./$$pkg ($$budget)"; \
		go test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$$budget -fuzzminimizetime=$(FUZZMINIMIZETIME) ./$$pkg; \
	done

# The guard-rails that need no daemon: gofmt, the supervisor binary's whole
# dependency graph (depguard in `make lint` sees direct imports only), and
# FUZZ_TARGETS naming every Fuzz function.
check:
	hack/check.sh $(FUZZ_TARGETS)

test:
	hack/test.sh

# promtool's checks and unit tests of the shipped alerts
# (charts/restart-injector/files/prometheus-rules.yaml, the spec of
# deploy/components/prometheus-rule too), and every query of the Grafana
# dashboard (files/grafana-dashboard.json) through promtool's parser. Without
# PROMTOOL, promtool 3.16 is built from the Go module proxy on first use
# (hack/promtool.sh, 24 min cold); PROMTOOL=path uses a promtool at hand:
# `make test` gives it Debian's 2.42 (hack/promtool-debian.sh, seconds).
PROMTOOL ?=
rules-test:
	@p='$(PROMTOOL)'; [ -n "$$p" ] || p="$$(hack/promtool.sh | tail -1)/promtool"; \
		"$$p" check rules charts/restart-injector/files/prometheus-rules.yaml && \
		"$$p" test rules test/rules/prometheus-rules_test.yaml && \
		PROMTOOL="$$p" go test -count=1 -run 'TestDashboard' ./test/rules/

# One run of every benchmark (supervisor, inject, webhook), each figure beside
# its baseline from the same run; regenerates README's "Measured" table and
# docs/benchmarks.md's latest run from docs/benchmarks-run.tsv. About 4 min.
bench:
	bash bench/run.sh

# The group-restart scale harness (test/apiserver/groupscale_test.go): N simulated
# nodes of one group, each the real node agent and the real supervisor, against a
# real API server; writes docs/gang.md's "At scale" table. GROUPSCALE_SIZES
# (default 8,16,32,64), GROUPSCALE_ROUNDS (default 3). The design before the
# per-node reports runs first, from a work tree of GROUPSCALE_BEFORE_REF with its
# harness given a connection per agent as this one's (testdata/groupscale-before.patch),
# at GROUPSCALE_BEFORE_SIZES (empty: not run), and its table follows the new one.
GROUPSCALE_BEFORE_REF ?= b71c437
GROUPSCALE_BEFORE_SIZES ?= 8,16,32,64
groupscale:
	@if [ -n "$(GROUPSCALE_BEFORE_SIZES)" ]; then \
	  before=$$(mktemp -d)/before && git worktree add --detach $$before $(GROUPSCALE_BEFORE_REF) && \
	  git -C $$before apply $(CURDIR)/test/apiserver/testdata/groupscale-before.patch && \
	  (cd $$before && GROUPSCALE_SIZES=$(GROUPSCALE_BEFORE_SIZES) go test -tags groupscale -count=1 -v -timeout 60m -run '^TestGroupScale$$' ./test/apiserver/ -update-gang) && \
	  mkdir -p bin && cp $$before/docs/gang.md bin/gang-before.md && git worktree remove --force $$before; \
	fi
	GROUPSCALE_BEFORE=$(if $(GROUPSCALE_BEFORE_SIZES),$(CURDIR)/bin/gang-before.md) GROUPSCALE_BEFORE_REF=$(GROUPSCALE_BEFORE_REF) \
	  go test -tags groupscale -count=1 -v -timeout 120m -run '^TestGroupScale$$' ./test/apiserver/ -update-gang

# The conformance table on every release of the matrix (docs/conformance-matrix.md):
# v1.34.4 (test/e2e/setup.sh's), then each release of CONFORMANCE_VERSIONS built
# (cached) by hack/kube-binaries.sh, each in the three modes of CONFORMANCE_MODES (native,
# supervised, and auto: the release's default gates with the webhook in --native=auto),
# each writing docs/conformance-<version>.md and docs/conformance-auto-<version>.md even
# where rows fail, and the matrix of all of them, docs/conformance.md. About 11 minutes a
# release once built; root. Fails if any release had a failing row.
# Then the auto runs on nodes unlike their control plane (CONFORMANCE_SKEW_KUBELETS:
# the newest release's control plane over older kubelets; CONFORMANCE_KUBELET_GATES:
# the newest release with each gate setting on its kubelet only), about 4 minutes each.
CONFORMANCE_VERSIONS ?= v1.33.13 v1.35.4 v1.36.3 v1.37.2
CONFORMANCE_MODES ?= native,supervised,auto
CONFORMANCE_NEWEST ?= v1.37.2
CONFORMANCE_SKEW_KUBELETS ?= v1.34.4 v1.35.4
CONFORMANCE_KUBELET_GATES ?= RestartAllContainersOnContainerExits=false
conformance:
	rc=0; E2E_MODES=$(CONFORMANCE_MODES) E2E_WRITE_REPORT=1 go test -count=1 -run TestConformance -v -timeout 60m ./test/e2e/ || rc=1; \
	for v in $(CONFORMANCE_VERSIONS); do \
		dir=$$(KUBE_VERSION=$$v hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager | tail -1) || exit 1; \
		E2E_MODES=$(CONFORMANCE_MODES) E2E_WRITE_REPORT=1 KUBE_BIN_DIR=$$dir go test -count=1 -run TestConformance -v -timeout 60m ./test/e2e/ || rc=1; \
	done; \
	newest=$$(KUBE_VERSION=$(CONFORMANCE_NEWEST) hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager | tail -1) || exit 1; \
	for v in $(CONFORMANCE_SKEW_KUBELETS); do \
		kdir=$$(KUBE_VERSION=$$v hack/kube-binaries.sh kubelet | tail -1) || exit 1; \
		E2E_MODES=auto E2E_WRITE_REPORT=1 KUBE_BIN_DIR=$$newest E2E_KUBELET_BIN_DIR=$$kdir go test -count=1 -run 'TestConformance$$' -v -timeout 30m ./test/e2e/ || rc=1; \
	done; \
	for g in $(CONFORMANCE_KUBELET_GATES); do \
		E2E_MODES=auto E2E_WRITE_REPORT=1 KUBE_BIN_DIR=$$newest E2E_KUBELET_GATES=$$g go test -count=1 -run 'TestConformance$$' -v -timeout 30m ./test/e2e/ || rc=1; \
	done; exit $$rc

# The conformance table again with the supervisor delivered as an image volume
# (no install container) on nodes running containerd 2 (hack/containerd.sh,
# built from the Go module proxy, about 75 s cold), native and supervised, on
# each release of CONFORMANCE_IMAGE_VERSIONS (ImageVolume is on by default from
# 1.35): writes docs/conformance-image-<version>.md. CONFORMANCE_IMAGE_DELIVERY
# is the webhook's --delivery: auto (the default, as deployed) must choose the
# image volume on these nodes, and the run fails if it does not; image forces it.
# Every wrapped pod of a row is checked to have the image volume and no install
# container. About 11 minutes a release; root.
CONFORMANCE_IMAGE_VERSIONS ?= v1.35.4 v1.36.3 v1.37.2
CONFORMANCE_IMAGE_DELIVERY ?= auto
conformance-image:
	rc=0; cdir=$$(hack/containerd.sh | tail -1) || exit 1; \
	for v in $(CONFORMANCE_IMAGE_VERSIONS); do \
		dir=$$(KUBE_VERSION=$$v hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager | tail -1) || exit 1; \
		E2E_DELIVERY=$(CONFORMANCE_IMAGE_DELIVERY) E2E_CONTAINERD_DIR=$$cdir E2E_WRITE_REPORT=1 KUBE_BIN_DIR=$$dir go test -count=1 -run 'TestConformance$$' -v -timeout 60m ./test/e2e/ || rc=1; \
	done; exit $$rc

# Upstream Kubernetes' own e2e specs for container restart rules and
# RestartAllContainers (test/e2e/common/node/container_restart_policy.go of
# each release of UPSTREAM_E2E_VERSIONS), run as written through upstream's
# e2e framework on the real-node cluster of that release, natively and
# supervised (test/e2e TestUpstreamSpecs, build tag upstream): writes
# docs/upstream-e2e-<version>.md, one row per spec, each supervised failure
# classed and its evidence quoted. hack/kube-binaries.sh builds the cluster
# (kube-scheduler too: upstream's pods carry no node name) and
# hack/upstream-e2e.sh the specs' test binary, both cached under
# ~/.cache/restart-supervisor. Root; about 12 minutes a release once built
# (a supervised spec that waits for restartCount waits its full 10 minutes).
UPSTREAM_E2E_VERSIONS ?= v1.37.2
upstream-e2e:
	rc=0; for v in $(UPSTREAM_E2E_VERSIONS); do \
		dir=$$(KUBE_VERSION=$$v hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler | tail -1) || exit 1; \
		specs=$$(KUBE_VERSION=$$v hack/upstream-e2e.sh | tail -1) || exit 1; \
		KUBE_BIN_DIR=$$dir UPSTREAM_E2E_BIN_DIR=$$specs go test -tags upstream -count=1 -run '^TestUpstreamSpecs$$' -v -timeout 90m ./test/e2e/ || rc=1; \
	done; exit $$rc

# examples/training (PyTorch DDP over gloo, Debian's python3-torch): first
# under the real supervisor, one per rank, on loopback (test/training,
# docs/training-process.md); then examples/training/docker.sh as the README
# gives it, unfaulted and faulted (test/docker TestTrainingExample); then on
# a real kubelet, every recovery path side by side in three scenarios: two
# pods of one rank, two pods of two ranks under torchrun, two pods of a
# trainer and a sidecar; then a rank that hangs, found by the watchdog, a
# liveness probe or the collective timeout, and the watchdog under CPU load
# (test/e2e TestTrainingOnKubelet, docs/training.md). TRAINING_RUNS
# (default 5) runs each row; TRAINING_PATHS (path ids, e.g.
# TRAINING_PATHS=group,supervised) runs some paths and rewrites only their
# rows of docs/training-<release>.md; KUBE_BIN_DIR picks the
# release (setup.sh's by default). Root; the first run installs
# python3-torch (about 150 MB) and builds the training image
# (hack/training-rootfs.sh, about 3 min, 1.2 GB, cached); about 33 minutes
# a release here, and about 20 more for the hang rows (TRAINING_PATHS of
# their five paths: about 20 minutes with the cluster's start, 5 of them
# the check under load) and about 20 for the queue rows (Kueue, built by
# hack/kueue.sh from the module proxy: about 3 min cold, cached).
training:
	dpkg -s python3-torch >/dev/null 2>&1 || hack/apt-install.sh python3-torch
	RUNS=$(TRAINING_RUNS) go test -tags training -count=1 -v -timeout 30m ./test/training -update
	go test -tags training -count=1 -v -timeout 15m -run '^TestTrainingExample$$' ./test/docker
	TRAINING_RUNS=$(TRAINING_RUNS) go test -tags training -count=1 -v -timeout 150m -run TestTrainingOnKubelet ./test/e2e -update-training

# What injection costs a pod's start on the real kubelet: PODSTART_PODS pods
# (default 100) uninjected, injected offline and by the webhook, in waves of
# 10 and all at once (test/e2e TestPodStart, writes
# docs/podstart-<release>.md), on setup.sh's release (v1.34.4: the copy only,
# Debian's containerd) and on the newest on containerd 2 (hack/containerd.sh),
# where the image-volume delivery has rows of its own; each release also
# measures the install container's own resources on Burstable pods (fixed
# 10m/16Mi as before, the pod's own container's now, the image volume:
# TestInstallContainerLimitOnKubelet, docs/podstart-resources-<release>.md,
# about 4 minutes), and by the pod's volumes: none, an emptyDir of its own, the
# service account's token (the default), each with every delivery, interleaved
# (TestPodStartVolumes, docs/podstart-volumes-<release>.md, about 10 minutes).
# Then the node agent over 10 and 110 pods of its node (the
# kubelet's default --max-pods) on a real kube-apiserver: CPU a scan, peak
# RSS, write → metric and → Event (test/apiserver TestNodeAgentAtNodeScale,
# about 2 min). Then PODBURST_PODS pods (default 5000) created in one burst
# through a real kube-apiserver of the default and of the newest release,
# without and through two webhook replicas (test/apiserver
# TestPodBurstThroughAPIServer, docs/podburst-<release>.md, about 2 min
# each). Root; about 35 minutes here (TestPodStartVolumes: 6 to 7 minutes a release).
PODSTART_PODS ?= 100
PODBURST_PODS ?= 5000
podstart:
	PODSTART_PODS=$(PODSTART_PODS) go test -tags podstart -count=1 -v -timeout 3h -run '^(TestPodStart|TestInstallContainerLimitOnKubelet|TestPodStartVolumes)$$' ./test/e2e
	cdir=$$(hack/containerd.sh | tail -1) && \
	dir=$$(KUBE_VERSION=$(CONFORMANCE_NEWEST) hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager | tail -1) && \
	PODSTART_CONTAINERD_DIR=$$cdir KUBE_BIN_DIR=$$dir PODSTART_PODS=$(PODSTART_PODS) go test -tags podstart -count=1 -v -timeout 3h -run '^(TestPodStart|TestInstallContainerLimitOnKubelet|TestPodStartVolumes)$$' ./test/e2e
	go test -tags podstart -count=1 -v -timeout 15m -run '^TestNodeAgentAtNodeScale$$' ./test/apiserver
	PODBURST_PODS=$(PODBURST_PODS) go test -tags podstart -count=1 -v -timeout 20m -run '^TestPodBurstThroughAPIServer$$' ./test/apiserver -update-podburst
	PODBURST_PODS=$(PODBURST_PODS) PODBURST_KUBE_VERSION=$(CONFORMANCE_NEWEST) go test -tags podstart -count=1 -v -timeout 20m -run '^TestPodBurstThroughAPIServer$$' ./test/apiserver -update-podburst

# Group restarts on two real kubelets (docs/gang.md): for each size of
# GANG_SIZES, GANG_RUNS restarts of a supervised group (RestartGroup, a node
# agent per node) and of the same pods as a JobSet its failurePolicy
# recreates; writes docs/gang-<release>.md. Then the two delivery paths a
# node agent could take to a supervisor, measured on the kubelet
# (TestGroupDeliveryCandidates, logged). KUBE_BIN_DIR picks the release.
GANG_SIZES ?= 2,8,64
GANG_RUNS ?= 5
gang:
	GANG_SIZES=$(GANG_SIZES) GANG_RUNS=$(GANG_RUNS) go test -tags gang -count=1 -v -timeout 3h -run '^(TestGangBenchmark|TestGroupDeliveryCandidates)$$' ./test/e2e

# The Kubeflow training-operator and KubeRay, built from the Go module proxy
# (hack/training-operator.sh, hack/kuberay.sh: about 5 min each cold, cached
# under ~/.cache/restart-supervisor), run on a real kube-apiserver over what
# inject wrote: their own pods must carry the pod policy inject assumed. Out
# of `make test` for the cold builds' sake; root not needed.
controllers:
	go test -tags controllers -count=1 -v -timeout 30m -run 'TestTrainingOperatorPodPolicy|TestKubeRayPodPolicy' ./test/apiserver

# The suites of SWEEP_SUITES (default unit and e2e) SWEEP_ROUNDS times (5)
# beside SWEEP_LOOPS CPU-bound loops (2), to find tests whose outcome depends
# on timing: one line per run, its failed tests, exit 1 on any failure
# (hack/load-sweep.sh). Root for the real-node suites; about an hour here.
sweep:
	hack/load-sweep.sh

e2e-up:
	hack/e2e-up.sh

e2e-down:
	hack/e2e-down.sh

clean:
	rm -rf bin
