#!/bin/sh
# A workload that fails with exit code 42 on its first two runs and succeeds
# on the third. It counts its runs in $EXAMPLE_STATE_DIR/runs, so every run
# of the example starts from a fresh directory.
set -eu
state=${EXAMPLE_STATE_DIR:?set EXAMPLE_STATE_DIR to a writable directory}
n=$(cat "$state/runs" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$state/runs"
if [ "$n" -le 2 ]; then
	echo "workload: run $n: simulating a retriable failure, exit 42"
	exit 42
fi
echo "workload: run $n: done, exit 0"
