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
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		log "need root to install: ${missing[*]}"
		exit 1
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
	apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

hack/kube-binaries.sh etcd kube-apiserver kubectl kubelet kube-controller-manager | tail -1
