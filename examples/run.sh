#!/usr/bin/env bash
# Builds restart-supervisor and runs the exit-42 example: the workload
# exits 42 twice and is restarted in place each time (see the
# "restarting in place" log lines), then exits 0, which ends the run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/restart-supervisor" ./cmd/restart-supervisor)
mkdir "$work/state"

set +e
EXAMPLE_STATE_DIR="$work/state" "$work/restart-supervisor" \
	--config "$root/examples/exit42/config.yaml" -- "$root/examples/exit42/workload.sh"
status=$?
set -e
echo "restart-supervisor exited with status $status after $(cat "$work/state/runs") runs"
exit "$status"
