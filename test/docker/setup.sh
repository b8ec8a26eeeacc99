#!/usr/bin/env bash
# Makes a Docker engine answer on this machine, for the Docker end-to-end tests
# (go test ./test/docker) and bench/docker/restart.sh.
#
# Idempotent: installs Debian's docker.io (engine, containerd, runc, tini as
# docker-init), docker-compose and busybox-static only when missing, and starts dockerd in the
# background only when `docker info` gets no answer. No registry is reachable
# here, so nothing is pulled: the tests import their images from a rootfs.
#
# Exit status: 0 when an engine answers, 1 otherwise (with the reason on stderr).
set -euo pipefail

log() { echo "docker-setup: $*" >&2; }

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
[ -x /bin/busybox ] || missing+=(busybox-static)
# The benchmark compares against Docker's --init, which is tini shipped as docker-init.
command -v docker-init >/dev/null 2>&1 || [ -x /usr/sbin/docker-init ] || [ -x /usr/bin/docker-init ] || missing+=(tini)
# restart-injector compose is tested with Debian's docker-compose (1.29.2 in bookworm).
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
"$(dirname "$0")/../../hack/apt-install.sh" "${missing[@]}"

if engine_answers; then
	log "engine already answering"
	exit 0
fi

logfile=${DOCKERD_LOG:-/var/log/dockerd.log}
log "starting dockerd (log: $logfile)"
# setsid: dockerd must outlive the shell (and the go test) that started it.
# No other init system runs here, so dockerd starts containerd itself.
setsid dockerd >"$logfile" 2>&1 </dev/null &

for _ in $(seq 1 120); do
	if engine_answers; then
		log "engine answering"
		exit 0
	fi
	sleep 0.5
done
log "dockerd did not answer within 60s; last log lines:"
tail -n 20 "$logfile" >&2 || true
exit 1
