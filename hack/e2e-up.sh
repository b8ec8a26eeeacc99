#!/usr/bin/env bash
# Starts the single-node end-to-end cluster (containerd, etcd, kube-apiserver,
# kubelet, kube-controller-manager with the job controller) under
# /tmp/restart-supervisor-e2e and leaves it running for exploring.
#
#   hack/e2e-up.sh                       # native: ContainerRestartRules on
#   hack/e2e-up.sh --supervised          # gate off, supervisor image imported
#   eval "$(hack/e2e-up.sh | tail -1)"   # export KUBECONFIG=...
#   hack/e2e-down.sh                     # remove everything again
#
# Takes the node lock that the Go tests' clusters hold (/tmp/restart-supervisor-e2e.lock):
# refuses, exit 1, while a test uses the node, or while a cluster brought up by hand still
# runs (hack/e2e-down.sh first); the tests likewise refuse to replace a cluster brought up
# by hand. Needs root. Installs Debian's containerd/runc/CNI plugins/busybox-static
# when missing and builds the Kubernetes binaries once (hack/kube-binaries.sh).
# Prints `export KUBECONFIG=...` as its last stdout line.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir="$(test/e2e/setup.sh | tail -1)"
exec go run ./test/e2e/cmd/e2e-cluster up --bin-dir "$bin_dir" "$@"
