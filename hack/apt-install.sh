#!/usr/bin/env bash
# Installs the named Debian packages: the one place the test setup scripts
# call apt from. Waits for a dpkg lock held by another install instead of
# failing, and needs root.
set -euo pipefail
[ "$#" -gt 0 ] || exit 0
if [ "$(id -u)" != 0 ]; then
	echo "apt-install: need root to install: $*" >&2
	exit 1
fi
echo "apt-install: installing $*" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >&2
