#!/usr/bin/env bash
# Runs test suites several times beside CPU-bound loops, to find the tests
# whose outcome depends on timing (a probe landing between two lines of a
# workload, a read racing a write) rather than on order. A test that fails
# here has a window to close by construction (an order of events, a
# barrier), not by a longer sleep.
#
#   SWEEP_ROUNDS  rounds (default 5)
#   SWEEP_LOOPS   CPU-bound loops beside the suites (default 2: one per core here)
#   SWEEP_SUITES  suites of a round, run in this order (default "unit e2e"):
#                 unit (make unit), e2e (test/e2e: containerd and a real
#                 kubelet), docker (test/docker: a real Docker engine),
#                 apiserver (test/apiserver: etcd and kube-apiserver)
#   SWEEP_DIR     where each run's output goes (default bin/sweep)
#
# Prints one line per suite run (round, suite, exit code, seconds, the load
# average when it ended, the failed tests) and exits 1 when any failed.
# Root, and what `make test` installs, for every suite but unit.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${SWEEP_ROUNDS:-5}
loops=${SWEEP_LOOPS:-2}
suites=${SWEEP_SUITES:-unit e2e}
dir=${SWEEP_DIR:-bin/sweep}
mkdir -p "$dir"

pids=()
stop_loops() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null; }
trap stop_loops EXIT
for _ in $(seq "$loops"); do
	# A shell loop with no system call: it competes for the CPU only, as
	# other tenants' work does on a shared CI machine.
	sh -c 'while :; do :; done' &
	pids+=($!)
done

run_suite() {
	case $1 in
	unit) make --no-print-directory unit GOTESTFLAGS=-v ;;
	e2e | docker | apiserver) go test -count=1 -v -timeout 45m "./test/$1" ;;
	*)
		echo "load-sweep: unknown suite $1 (unit, e2e, docker, apiserver)" >&2
		return 2
		;;
	esac
}

failed=0
printf '%-5s %-9s %-3s %-6s %-5s %s\n' round suite rc secs load failed
for r in $(seq "$rounds"); do
	for s in $suites; do
		log="$dir/round$r-$s.log"
		start=$(date +%s)
		run_suite "$s" >"$log" 2>&1
		rc=$?
		secs=$(($(date +%s) - start))
		load=$(cut -d' ' -f1 /proc/loadavg)
		# The deepest failed test of each failing line: "--- FAIL: TestX/sub".
		names=$(grep -oE -- '--- FAIL: [^ ]+' "$log" | awk '{print $3}' | sort -u | tr '\n' ' ')
		[ "$rc" -eq 0 ] || failed=1
		printf '%-5s %-9s %-3s %-6s %-5s %s\n' "$r" "$s" "$rc" "$secs" "$load" "${names:--}"
	done
done
exit "$failed"
