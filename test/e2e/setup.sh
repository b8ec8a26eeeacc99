#!/usr/bin/env bash
# Installs what the end-to-end cluster needs and builds the Kubernetes
# binaries (cached), then prints the binary directory as the last stdout line.
#
# Idempotent: Debian's containerd, runc, containernetworking-plugins and
# busybox-static are installed only when missing; hack/kube-binaries.sh skips
# binaries that are already built.
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { echo "e2e-setup: $*" >&2; }

missing=()
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
dpkg -s containernetworking-plugins >/dev/null 2>&1 || missing+=(containernetworking-plugins)
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
hack/apt-install.sh "${missing[@]}"

hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler | tail -1
