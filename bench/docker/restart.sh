#!/usr/bin/env bash
# Restart latency under Docker, side by side in one run: the same workload
# restarted by Docker's own restart policy (--restart on-failure), by Docker
# with its --init (tini as PID 1), and in place by restart-supervisor
# (bind-mounted, as `restart-injector docker-args` prints it).
#
# Measured: from the workload's exit (a timestamp it writes just before
# `exit 1`) to the next run writing its start timestamp, in microseconds,
# from the kernel clock via busybox adjtimex, into a bind-mounted file.
# Docker's restart manager waits 100 ms before the first restart and doubles
# the wait each time (it cannot be set lower), so its figures are given for
# the first restart and as the median over DOCKER_RESTARTS restarts;
# restart-supervisor runs with backoff 0 (the kubelet default would wait 10s).
# The last row is the floor: a shell loop re-running the same workload in one
# container, which pays the workload's own start-up and time stamps and no
# supervision at all.
#
# Usage: bench/docker/restart.sh [SUPERVISOR_RESTARTS (default 200)] [DOCKER_RESTARTS (default 6)]
# Needs root and a Docker engine (test/docker/setup.sh starts one). A benchmark,
# not a test: it prints figures and ratios; it asserts nothing about speed.
set -euo pipefail
cd "$(dirname "$0")/../.."

sup_n=${1:-200}
docker_n=${2:-6}
image=restart-supervisor-bench/busybox:latest

bash test/docker/setup.sh >/dev/null 2>&1 || { echo "no Docker engine (test/docker/setup.sh failed)" >&2; exit 1; }

work=$(mktemp -d)
containers=()
cleanup() {
	[ ${#containers[@]} -eq 0 ] || docker rm -f "${containers[@]}" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/restart-supervisor" ./cmd/restart-supervisor
go build -o "$work/restart-injector" ./cmd/restart-injector

# A registry-free image: Debian's static busybox and a link per applet.
bash test/docker/busybox-image.sh "$image" >/dev/null

# Each run: count itself, stamp its start; the last run exits 0, the others
# stamp their exit and exit 1.
workload='n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n
{ echo "start $n"; adjtimex | grep tv_; } >> /data/ts
[ $n -gt $RUNS ] && exit 0
{ echo "exit $n"; adjtimex | grep tv_; } >> /data/ts
exit 1'

# latencies FILE: one line per restart, microseconds from exit k to start k+1.
latencies() {
	awk '$1=="start"||$1=="exit"{ev=$1; n=$2; next}
	     $1=="time.tv_sec:"{s=$2; next}
	     $1=="time.tv_usec:"{t=s*1000000+$2; if(ev=="exit") ex[n]=t; else if((n-1) in ex) print t-ex[n-1]}' "$1"
}
median() { sort -n | awk '{v[NR]=$1} END{ if(NR==0){print "nan"; exit} if(NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2 }'; }

run_case() { # name runs docker-run-args...
	local name=$1 runs=$2; shift 2
	local dir="$work/$name"
	mkdir -p "$dir"
	local c="rs-bench-$name-$$"
	containers+=("$c")
	docker run -d --name "$c" -v "$dir:/data" -e RUNS="$runs" "$@" >/dev/null
	# docker wait returns at the first exit even when Docker will restart
	# the container, so wait for the last run's count and a final exit.
	local code="" st
	for _ in $(seq 1 1200); do
		st=$(docker inspect -f '{{.State.Status}} {{.State.ExitCode}}' "$c")
		if [ "${st% *}" = exited ] && [ "$(cat "$dir/n" 2>/dev/null || echo 0)" -gt "$runs" ]; then code=${st#* }; break; fi
		if [ "${st% *}" = exited ] && [ "${st#* }" != 1 ]; then code=${st#* }; break; fi
		sleep 0.1
	done
	[ "$code" = 0 ] || { echo "$name: container exited $code, want 0; logs:" >&2; docker logs "$c" >&2; exit 1; }
	latencies "$dir/ts" > "$dir/lat"
	local got
	got=$(wc -l < "$dir/lat")
	[ "$got" -eq "$runs" ] || { echo "$name: measured $got restarts, want $runs" >&2; exit 1; }
}

rules="$work/rules.yaml"
printf 'restartPolicy: OnFailure\nbackoff: {initial: 0s, max: 0s}\n' > "$rules"
# docker-args prints one shell-quoted line; eval turns it into the argument array.
eval "sup_args=($("$work/restart-injector" docker-args "$image" --rules "$rules" --supervisor "$work/restart-supervisor" -- sh -c "$workload"))"

echo "restart latency, workload exit -> workload running again (microseconds)" >&2
run_case docker-restart "$docker_n" --restart on-failure "$image" sh -c "$workload"
run_case docker-init "$docker_n" --init --restart on-failure "$image" sh -c "$workload"
run_case supervisor "$sup_n" "${sup_args[@]}"
# The floor: a shell loop in one container re-running the workload, so the
# cost of the workload's own start and time stamps is visible.
run_case shell-loop "$sup_n" -e W="$workload" "$image" sh -c 'while :; do sh -c "$W"; c=$?; [ $c = 1 ] || exit $c; done'

first() { head -n1 "$work/$1/lat"; }
med() { median < "$work/$1/lat"; }
sup_med=$(med supervisor)
printf '%-44s %9s %12s %12s %9s\n' "mode" "restarts" "first (us)" "median (us)" "x supervisor"
for m in docker-restart docker-init supervisor shell-loop; do
	case $m in
	docker-restart) label="docker --restart on-failure";;
	docker-init) label="docker --init (tini) --restart on-failure";;
	supervisor) label="restart-supervisor in place (backoff 0)";;
	shell-loop) label="floor: sh while-loop in the container";;
	esac
	printf '%-44s %9d %12d %12.0f %9.1f\n' "$label" "$(wc -l < "$work/$m/lat")" "$(first $m)" "$(med $m)" "$(awk -v a="$(med $m)" -v b="$sup_med" 'BEGIN{print a/b}')"
done
