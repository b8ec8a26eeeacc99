#!/usr/bin/env bash
# Tears down the cluster started by hack/e2e-up.sh: pods, containerd and its
# shims, the control plane, mounts under the state directory, the kubepods
# cgroups and the sysctls the kubelet changed.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./test/e2e/cmd/e2e-cluster down "$@"
