# hack/lib/cache.sh — sourced by the hack/ scripts that build a tool from
# the Go module proxy into a cache directory outside the repo (helm.sh,
# promtool.sh, cert-manager.sh, jobset.sh, kueue.sh, containerd.sh, kuberay.sh,
# training-operator.sh): their logging, their lock on the cache directory,
# the cache hit, and the scratch and staging directories, written once.
#
# The sourcing script sets BIN_DIR and defines is_ready (true when BIN_DIR
# holds what it builds, at the right version), then:
#
#   cache_init NAME            # log and die say [NAME]; go must be on PATH
#   cache_lock DIR             # DIR made and locked until the script exits
#   cache_lock_or_hit WHAT VER # BIN_DIR made and locked; on a hit, logs
#                              # "WHAT: cached (VER)", prints BIN_DIR, exits 0
#   cache_workdirs             # $work and $stage, removed at exit; $start
#   cache_module MOD VER GO    # a module in $work requiring MOD at VER
#   cache_go build -o "$stage/x" PKG   # go in that module
#   cache_crds DIR GLOB        # MOD's CRDs into $stage/crds
#   ... move what $stage holds into $BIN_DIR (cache_commit_crds) ...
#   echo "$BIN_DIR"            # the last line on stdout is the directory

log() { printf '[%s] %s\n' "${CACHE_NAME:-build}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

cache_init() {
	CACHE_NAME=$1
	command -v go >/dev/null || die "go not found in PATH"
}

# cache_lock DIR makes DIR and serialises concurrent callers (parallel
# test packages) on it; the lock is held until the script exits.
cache_lock() {
	mkdir -p "$1"
	if command -v flock >/dev/null; then
		exec 9>"$1/.lock"
		if ! flock -n 9; then
			log "waiting for another build into $1"
			flock 9
		fi
	fi
}

cache_lock_or_hit() {
	cache_lock "$BIN_DIR"
	if is_ready; then
		log "$1: cached ($2)"
		echo "$BIN_DIR"
		exit 0
	fi
}

# $stage lies in BIN_DIR, so that moving what was built into the cache is
# a rename on one filesystem; $work is scratch space (a module to build
# from).
cache_workdirs() {
	work="$(mktemp -d "${TMPDIR:-/tmp}/$CACHE_NAME-build.XXXXXX")"
	stage="$(mktemp -d "$BIN_DIR/.stage.XXXXXX")"
	trap 'rm -rf "$work" "$stage"' EXIT
	start=$SECONDS
}

# cache_module MOD VERSION GO writes a module into $work that requires MOD
# at VERSION (Go language version GO), so that a build there takes MOD's
# own dependency graph and never this repository's. Not `go install
# pkg@version` for the modules whose version list the module proxy
# refuses (it reads the list for deprecations).
cache_module() {
	printf 'module restart-supervisor-%s\n\ngo %s\n\nrequire %s %s\n' "$CACHE_NAME" "$3" "$1" "$2" >"$work/go.mod"
	CACHE_MOD=$1
}

# cache_go ARGS... runs go in $work's module, outside any workspace,
# statically linked, its output on stderr.
cache_go() {
	(cd "$work" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go "$@" >&2)
}

# cache_moddir prints where the source of cache_module's MOD is (the
# module cache), for the files a release ships beside its code.
cache_moddir() {
	(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$CACHE_MOD")
}

# cache_crds SUBDIR GLOB copies MOD's CustomResourceDefinitions matching
# GLOB from SUBDIR of its source into $stage/crds, writable (the module
# cache's files are read-only); cache_commit_crds moves them into BIN_DIR.
cache_crds() {
	local moddir
	moddir="$(cache_moddir)"
	compgen -G "$moddir/$1/$2" >/dev/null || die "no CRD $1/$2 in $moddir"
	mkdir -p "$stage/crds"
	cp "$moddir/$1"/$2 "$stage/crds/"
	chmod u+w "$stage/crds"/*.yaml
}

cache_commit_crds() {
	rm -rf "$BIN_DIR/crds"
	mv "$stage/crds" "$BIN_DIR/crds"
}
