#!/usr/bin/env bash
# hack/promtool-debian.sh — Debian's promtool, unpacked from the prometheus
# package into a cache directory, not installed (installing the package
# would also enable a Prometheus service).
#
# Why: `make test` runs the alerts' promtool tests (`make rules-test`) on
# every run, and CI's cold budget has no room for hack/promtool.sh's build
# of Prometheus 3 from the Go module proxy (24 min here). Debian 12's
# promtool is 2.42: the rule file and its unit tests are checked by both
# (make rules-test without PROMTOOL builds and uses 3.16).
#
# Usage:
#   dir=$(hack/promtool-debian.sh | tail -1)
#   "$dir/promtool" --version
#
# The last line on stdout is the directory of promtool; progress goes to
# stderr.
set -euo pipefail

BIN_DIR="${PROMTOOL_DEBIAN_DIR:-${HOME}/.cache/restart-supervisor/promtool-debian}"

# shellcheck source=lib/cache.sh
. "$(dirname "$0")/lib/cache.sh"
cache_init promtool-debian

is_ready() { [[ -x "$BIN_DIR/promtool" ]] && "$BIN_DIR/promtool" --version >/dev/null 2>&1; }

cache_lock_or_hit "promtool" "Debian's"

cache_workdirs
command -v apt-get >/dev/null || die "apt-get not found: Debian's promtool needs Debian's package tools"
# apt's download runs as _apt, which must be able to write here.
chmod 755 "$work"
(
	cd "$work"
	apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
	apt-get download -qq prometheus >&2
	dpkg-deb -x prometheus_*.deb root
)
[[ -x "$work/root/usr/bin/promtool" ]] || die "the prometheus package holds no usr/bin/promtool"
mv -f "$work/root/usr/bin/promtool" "$BIN_DIR/promtool"
is_ready || die "unpacked, but promtool does not run"
log "promtool: $("$BIN_DIR/promtool" --version 2>&1 | head -1) in $((SECONDS - start))s"

echo "$BIN_DIR"
