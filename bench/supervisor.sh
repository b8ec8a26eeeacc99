#!/usr/bin/env bash
# Measures restart-supervisor against tini, dumb-init and a bare command, in
# one run on this machine, and prints medians and ratios:
#   1. stripped static binary size
#   2. start overhead of `X -- /bin/true`
#      2b. the same split into start-up (launch -> workload running) and exit
#          (workload exit -> X reaped), in the three forms the supervisor runs in
#   3. in-place restart latency (workload exit -> next workload running),
#      backoff 0, against the smallest possible fork/exec/wait loop
#   4. resident memory of the supervisor while supervising
#   5. go test -bench for the supervisor loop and the rules engine
# Baselines, all measured in the same run: the bare command, tini and
# dumb-init; go-floor (the Go runtime alone: fork/exec/wait4); deps-floor
# (go-floor plus what the supervisor cannot do without: the libraries the
# design names for it, its signal handlers, a PID 1's kernel steps, and in
# the injected form the config decode and two status documents).
# Environment: N (start-overhead rounds, default 300), RESTARTS (default 3000),
# BEFORE (a git revision: its supervisor is built the same way and measured
# beside this one, in the same interleaved rounds, for size, start and RSS),
# BENCH_RESULTS (a file the figures are appended to, as bench/run.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-300}
RESTARTS=${RESTARTS:-3000}

missing=()
command -v tini >/dev/null || missing+=(tini)
command -v dumb-init >/dev/null || missing+=(dumb-init)
if ((${#missing[@]})); then
	echo "installing ${missing[*]} (Debian packages)" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
fi

work=$(mktemp -d)
bgpid=
cleanup() { [[ -n $bgpid ]] && kill -KILL "$bgpid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

sup=$work/restart-supervisor
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$sup" ./cmd/restart-supervisor
before=
if [[ -n ${BEFORE:-} ]]; then
	mkdir "$work/before-src"
	git archive "$BEFORE" | tar -x -C "$work/before-src"
	before=$work/restart-supervisor-before
	(cd "$work/before-src" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$before" ./cmd/restart-supervisor)
fi
go build -o "$work/benchtool" ./bench/supervisor/benchtool
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/gofloor" ./bench/supervisor/gofloor
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/depsfloor" ./bench/supervisor/depsfloor
result() { [[ -z ${BENCH_RESULTS:-} ]] || printf '%s\t%s\n' "$1" "$2" >>"$BENCH_RESULTS"; }
if command -v gcc >/dev/null && gcc -O2 -static -o "$work/probe" bench/supervisor/cprobe/probe.c 2>/dev/null; then
	probe=("$work/probe")
	probekind="static C probe"
else
	probe=("$work/benchtool" probe)
	probekind="Go probe (no static C toolchain; Go start-up adds to every figure)"
fi
tini=$(command -v tini)
dumbinit=$(command -v dumb-init)

echo "== machine: $(nproc) CPUs, $(uname -sr), $(go version | cut -d' ' -f3), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "== 1. binary size (CGO_ENABLED=0 -trimpath -ldflags='-s -w'), target < 2.5 MB"
size=$(stat -c %s "$sup")
awk -v s="$size" 'BEGIN { printf "%-28s %9d bytes (%.2f MB)\n", "restart-supervisor", s, s / 1e6 }'
result size.restart-supervisor_bytes "$size"
if [[ -n $before ]]; then
	awk -v s="$(stat -c %s "$before")" -v r="$BEFORE" 'BEGIN { printf "%-28s %9d bytes (%.2f MB)\n", "restart-supervisor@" r, s, s / 1e6 }'
	result size.before_bytes "$(stat -c %s "$before")"
fi
for f in "$work/depsfloor" "$work/gofloor"; do
	printf "%-28s %9d bytes\n" "$(basename "$f")" "$(stat -c %s "$f")"
	result "size.$(basename "$f")_bytes" "$(stat -c %s "$f")"
done
for f in "$tini" /usr/bin/tini-static "$dumbinit"; do
	[[ -e $f ]] || continue
	link=dynamic
	ldd "$f" >/dev/null 2>&1 || link=static
	printf "%-28s %9d bytes (%s)\n" "$(basename "$f")" "$(stat -c %s "$f")" "$link"
	result "size.$(basename "$f")_bytes" "$(stat -c %s "$f")"
done
echo
echo "== 2. start overhead of X -- /bin/true ($N interleaved rounds), target <= 1.3x go-floor"
echo "   go-floor: the smallest Go program that fork/execs and waits (the Go runtime's own start-up)"
echo "   cpu: user+system time of X and everything it reaped"
cmds=(bare=/bin/true "tini=$tini -- /bin/true")
[[ -x /usr/bin/tini-static ]] && cmds+=("tini-static=/usr/bin/tini-static -- /bin/true")
cmds+=("dumb-init=$dumbinit /bin/true" "go-floor=$work/gofloor -- /bin/true" "deps-floor=$work/depsfloor -- /bin/true"
	"restart-supervisor=$sup -- /bin/true")
# The two forms the supervisor runs in: what `inject` writes (rules in the
# environment, the pod state volume; a fresh state directory per run, as in
# a new pod, so no run resumes the back-off of the one before), and
# --config FILE (live reload). The termination message goes to a file of
# this run instead of /dev/termination-log.
onecfg='{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}'
printf '%s\n' "$onecfg" >"$work/rules.json"
# injected-rac is the injected form in a pod whose rules use
# RestartAllContainers: the injector adds the member list, and the
# supervisor watches pod-restarts/ with inotify.
members=RESTART_SUPERVISOR_POD_MEMBERS=c:regular
cmds+=("deps-floor-config=RESTART_SUPERVISOR_CONFIG=$onecfg $work/depsfloor -- /bin/true"
	"deps-floor-injected=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/state/{i} $work/depsfloor -- /bin/true"
	"injected-form=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $sup --termination-message-path $work/termination-log -- /bin/true"
	"injected-rac=$members RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $sup --termination-message-path $work/termination-log -- /bin/true"
	"config-file=$sup --config $work/rules.json -- /bin/true")
if [[ -n $before ]]; then
	cmds+=("before:plain=$before -- /bin/true"
		"before:injected=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $before --termination-message-path $work/termination-log -- /bin/true"
		"before:config-file=$before --config $work/rules.json -- /bin/true")
fi
"$work/benchtool" spawn -n "$N" -mkdir "$work/state/{i}" "${cmds[@]}"
echo
echo "== 2b. the same start and exit split in two ($N interleaved rounds, $probekind as the workload):"
echo "   launch -> workload running (start-up, fork, exec), workload exit -> X reaped (reaping, deciding, exit)"
mkdir -p "$work/split/state"
scmds=("go-floor=$work/gofloor -- ${probe[*]}" "deps-floor=$work/depsfloor -- ${probe[*]}" "restart-supervisor=$sup -- ${probe[*]}"
	"deps-floor-config=RESTART_SUPERVISOR_CONFIG=$onecfg $work/depsfloor -- ${probe[*]}"
	"deps-floor-injected=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/split/state/{i} $work/depsfloor -- ${probe[*]}"
	"injected-form=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/split/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $sup --termination-message-path $work/termination-log -- ${probe[*]}"
	"injected-rac=$members RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/split/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $sup --termination-message-path $work/termination-log -- ${probe[*]}"
	"config-file=$sup --config $work/rules.json -- ${probe[*]}")
if [[ -n $before ]]; then
	scmds+=("before:plain=$before -- ${probe[*]}"
		"before:injected=RESTART_SUPERVISOR_CONFIG=$onecfg RESTART_SUPERVISOR_STATE_DIR=$work/split/state/{i} RESTART_SUPERVISOR_CONTAINER_NAME=c $before --termination-message-path $work/termination-log -- ${probe[*]}"
		"before:config-file=$before --config $work/rules.json -- ${probe[*]}")
fi
"$work/benchtool" split -n "$N" -log "$work/split" -mkdir "$work/split/state/{i}" "${scmds[@]}" 2>/dev/null
echo
echo "== 3. in-place restart latency, workload exit -> next workload running, backoff 0 ($RESTARTS runs, $probekind)"
echo "   target: median < 1 ms, >= 1000 restarts/s"
cfg='{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"0s"},"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}'
PROBE_LOG=$work/base.log PROBE_N=$RESTARTS "$work/benchtool" respawn "${probe[@]}"
printf "%-28s " "bare fork/exec/wait4 loop"
"$work/benchtool" latency "$work/base.log" floor
PROBE_LOG=$work/sup.log PROBE_N=$RESTARTS RESTART_SUPERVISOR_CONFIG=$cfg "$sup" -- "${probe[@]}" 2>"$work/sup.stderr"
printf "%-28s " "restart-supervisor"
"$work/benchtool" latency "$work/sup.log" restart-supervisor
restarts=$(grep -c 'restarting in place' "$work/sup.stderr")
echo "   (supervisor logged $restarts in-place restarts to a file; log lines are part of the measured path)"
echo
echo "== 4. resident memory while supervising (VmRSS / VmHWM from /proc/PID/status), target < 4 MiB"
rss() { # label, result key, then the command
	local label=$1 key=$2
	shift 2
	"$@" 2>/dev/null &
	bgpid=$!
	sleep 1
	local vmrss vmhwm
	vmrss=$(awk '/^VmRSS/{print $2}' /proc/$bgpid/status)
	vmhwm=$(awk '/^VmHWM/{print $2}' /proc/$bgpid/status)
	printf "%-28s %s kB / %s kB\n" "$label" "$vmrss" "$vmhwm"
	result "rss.$key.rss_kb" "$vmrss"
	result "rss.$key.hwm_kb" "$vmhwm"
	kill -TERM "$bgpid" 2>/dev/null
	wait "$bgpid" 2>/dev/null || true
	bgpid=
}
rss "tini (idle, sleep)" tini "$tini" -- sleep 30
rss "dumb-init (idle, sleep)" dumb-init "$dumbinit" sleep 30
mkdir -p "$work/state/rss" "$work/state/rss-before" "$work/state/rss-floor"
sleepbin=$(command -v sleep) # the floors do not search PATH
rss "go-floor (idle)" go-floor "$work/gofloor" -- "$sleepbin" 30
rss "deps-floor (idle)" deps-floor "$work/depsfloor" -- "$sleepbin" 30
rss "deps-floor (idle, injected)" deps-floor-injected env RESTART_SUPERVISOR_CONFIG="$onecfg" RESTART_SUPERVISOR_STATE_DIR="$work/state/rss-floor" \
	"$work/depsfloor" -- "$sleepbin" 30
rss "restart-supervisor (idle)" restart-supervisor "$sup" -- sleep 30
if [[ -n $before ]]; then
	rss "before (idle)" before "$before" -- sleep 30
	rss "before (idle, injected)" before:injected env RESTART_SUPERVISOR_CONFIG="$onecfg" RESTART_SUPERVISOR_STATE_DIR="$work/state/rss-before" \
		RESTART_SUPERVISOR_CONTAINER_NAME=c "$before" --termination-message-path "$work/termination-log" -- sleep 30
fi
rss "restart-supervisor (idle, injected)" injected-form env RESTART_SUPERVISOR_CONFIG="$onecfg" RESTART_SUPERVISOR_STATE_DIR="$work/state/rss" \
	RESTART_SUPERVISOR_CONTAINER_NAME=c "$sup" --termination-message-path "$work/termination-log" -- sleep 30
rm -f "$work/storm.log" "$work/storm.log.count"
PROBE_LOG=$work/storm.log PROBE_N=100000000 RESTART_SUPERVISOR_CONFIG=$cfg \
	rss "restart-supervisor (restarting)" restarting "$sup" -- "${probe[@]}"
echo
echo "== 5. go test -bench"
go test -run '^$' -bench . -benchtime 2000x ./supervise | grep -E '^Benchmark'
go test -run '^$' -bench . ./rules | grep -E '^Benchmark'
