#!/usr/bin/env bash
# The checks of `make check`: gofmt, the supervisor binary's dependency
# graph, and that every fuzz target is run. Arguments: the Makefile's
# FUZZ_TARGETS (package:Function:inputs).
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	printf 'gofmt would change:\n%s\n' "$unformatted" >&2
	exit 1
fi

# log/slog: cmd/restart-supervisor writes slog's formats itself (log.go);
# slog would add about 100 kB to a binary whose pages are its resident set.
# crypto: crypto/rand alone links Go's FIPS module (drbg, AES, SHA-3),
# 159,744 B of binary and about 110 kB of idle resident set; nothing in
# PID 1 needs it.
if go list -deps ./cmd/restart-supervisor | grep -E '^(k8s\.io|net/http|net$|crypto(/|$)|google\.golang\.org/grpc|log/slog)'; then
	echo "cmd/restart-supervisor must not depend on the packages above" >&2
	exit 1
fi

# Its third-party packages are a closed list (ARCHITECTURE.md): the CLI
# libraries of restart-injector (pflag, cli-runtime's printers) and
# anything else stay out of the PID-1 binary.
others=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' ./cmd/restart-supervisor |
	grep -vE '^(github\.com/restart-supervisor/restart-supervisor(/|$)|golang\.org/x/sys/unix$|github\.com/fsnotify/fsnotify(/internal)?$|gopkg\.in/yaml\.v3$)' || true)
if [ -n "$others" ]; then
	printf 'cmd/restart-supervisor links third-party packages outside its closed list:\n%s\n' "$others" >&2
	exit 1
fi

# restart-injector (webhook, node agent, status) links none of the PID-1
# loop's packages: the node agent reads the state volume through statevol.
if go list -deps ./cmd/restart-injector | grep -E '^github\.com/restart-supervisor/restart-supervisor/(supervise|podstate|configreload)$'; then
	echo "cmd/restart-injector must not depend on the supervisor's packages above" >&2
	exit 1
fi

# The suites behind the training, podstart, gang, upstream and controllers build tags are neither
# built by `go vet ./...` nor by lint; vet them here so that they keep
# compiling.
go vet -tags training ./test/training ./test/e2e
go vet -tags podstart ./test/e2e
go vet -tags gang ./test/e2e
go vet -tags upstream ./test/e2e
go vet -tags controllers ./test/apiserver
go vet -tags groupscale ./test/apiserver
# The CLI on a laptop: restart-injector (and kubectl-restarts, the same
# binary) builds for macOS and Windows (arm64 and amd64 here; the other
# architecture differs in no file of the project); the supervisor and the
# node agent are Linux's.
GOOS=darwin GOARCH=arm64 go build -o /dev/null ./cmd/restart-injector
GOOS=windows GOARCH=amd64 go build -o /dev/null ./cmd/restart-injector
# The training report's own tests need no cluster: docs/training.md is what
# the harness writes, and a run of some paths keeps the other rows.
go test -tags training -count=1 -run '^(TestTrainingReportKeepsOtherRows|TestTrainingIndexIsGenerated)$' ./test/e2e

missing=0
while read -r file name; do
	pkg=$(dirname "$file")
	case " $* " in
	*" $pkg:$name:"*) ;;
	*)
		echo "$file: $name is not in the Makefile's FUZZ_TARGETS (as $pkg:$name:inputs)" >&2
		missing=1
		;;
	esac
done < <(git grep -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go' | sed -E 's/^([^:]+):func (Fuzz[A-Za-z0-9_]*)\(.*/\1 \2/')
# ...and every entry of FUZZ_TARGETS names a Fuzz function that exists
# where it says, or make fuzz would stop at it.
for target in "$@"; do
	pkg=${target%%:*}
	rest=${target#*:}
	name=${rest%%:*}
	if ! grep -qE "^func $name\(" "$pkg"/*_test.go 2>/dev/null; then
		echo "FUZZ_TARGETS: $target: no func $name in $pkg/*_test.go" >&2
		missing=1
	fi
done
exit $missing
