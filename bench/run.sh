#!/usr/bin/env bash
# One benchmark run of everything the README's "Measured" table reports,
# each figure beside its baseline from the same run:
#   bench/supervisor.sh     the supervisor against tini, dumb-init, go-floor
#                           and deps-floor (size, start and exit, restart, RSS)
#   bench/injector          `restart-injector inject` on 1000 and 10000
#                           documents, beside the binary's own floor
#   bench/webhook           the webhook at 1000 reviews/s against a no-op
#                           handler, shared cores and pinned
# It writes docs/benchmarks-run.tsv (every figure, with the run's date,
# commit, machine and load) and docs/benchmarks-run.log (what the programs
# printed), then regenerates README's "Measured" table and the latest-run
# section of docs/benchmarks.md from the TSV (go run ./bench/measured).
# Takes about 4 minutes. Environment: N, RESTARTS (bench/supervisor.sh),
# INJECT_RUNS (default 7), WEBHOOK_DURATION (default 30s).
set -euo pipefail
cd "$(dirname "$0")/.."
tsv=docs/benchmarks-run.tsv
log=docs/benchmarks-run.log
export BENCH_RESULTS
BENCH_RESULTS=$(mktemp)
work=$(mktemp -d)
trap 'rm -rf "$work" "$BENCH_RESULTS"' EXIT

meta() { printf '%s\t%s\n' "$1" "$2" >>"$BENCH_RESULTS"; }
meta meta.date "$(date -u +%Y-%m-%dT%H:%MZ)"
meta meta.commit "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' ':!README.md' || echo +changes)"
meta meta.cpus "$(nproc)"
meta meta.kernel "$(uname -r)"
meta meta.go "$(go env GOVERSION)"
meta meta.load_start "$(cut -d' ' -f1 /proc/loadavg)"

{
	echo "### bench/supervisor.sh"
	bash bench/supervisor.sh
	echo
	echo "### bench/injector"
	go build -o "$work/restart-injector" ./cmd/restart-injector
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/restart-probe" ./cmd/restart-probe
	meta size.restart-probe_bytes "$(stat -c %s "$work/restart-probe")"
	go run ./bench/injector -bin "$work/restart-injector" -docs 1000,10000 -runs "${INJECT_RUNS:-7}"
	echo
	echo "### bench/webhook"
	go run ./bench/webhook -rps 1000 -duration "${WEBHOOK_DURATION:-30s}"
} 2>&1 | tee "$work/log"
meta meta.load_end "$(cut -d' ' -f1 /proc/loadavg)"

cp "$BENCH_RESULTS" "$tsv"
cp "$work/log" "$log"
go run ./bench/measured -write
echo "wrote $tsv, $log; regenerated README.md's Measured table and docs/benchmarks.md's latest run"
