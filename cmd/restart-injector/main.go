// Command restart-injector rewrites Kubernetes pods and workload templates so
// that containers carrying restart rules run under restart-supervisor. The
// offline tools (inject, uninject, explain, docker-args, compose), the admission
// webhook (serve), the node agent (node-agent) and its kubectl view (status)
// share one binary; the subcommands table below lists them all, and
// each lives in its own file.
//
// Exit codes: 0 success; 1 failure (invalid rules, unresolvable image,
// unreadable input, server error); 2 usage error (unknown subcommand or flag).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

type subcommand struct {
	name    string
	summary string // one line, shown in the usage text
	run     func(ctx context.Context, args []string) int
}

// subcommands is every command of the binary, in the order the usage text
// lists them.
var subcommands = []subcommand{
	{"compose", "rewrite a Docker Compose file so services with restart rules run under restart-supervisor",
		func(ctx context.Context, args []string) int {
			return runCompose(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		}},
	{"docker-args", "print the docker run arguments that run an image under restart-supervisor",
		func(ctx context.Context, args []string) int {
			return dockerArgs(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		}},
	{"explain", "print, per container, what each exit code leads to once injected",
		func(ctx context.Context, args []string) int { return runExplain(args, os.Stdin, os.Stdout, os.Stderr) }},
	{"inject", "rewrite manifests so containers with restart rules run under restart-supervisor",
		func(ctx context.Context, args []string) int {
			return runInject(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		}},
	{"node-agent", "record Events and serve metrics of the in-place restarts on this node (DaemonSet)", runNodeAgent},
	{"serve", "run the mutating admission webhook (HTTPS)", runServe},
	{"status", "print the in-place restarts of supervised containers from the node agent's Events",
		func(ctx context.Context, args []string) int { return runStatus(ctx, args, os.Stdout, os.Stderr) }},
	{"uninject", "revert what inject did, from the record it left on each object",
		func(ctx context.Context, args []string) int {
			return runUninject(ctx, args, os.Stdin, os.Stdout, os.Stderr)
		}},
	{"version", "print the version, Go version and platform", runVersion},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: restart-injector COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w, "\nRun 'restart-injector COMMAND -h' for the flags of a command.")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 failure (invalid rules, unresolvable image, I/O), 2 usage error.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	// Installed as the kubectl plugin `kubectl restarts`: a link named
	// kubectl-restarts runs the status command.
	if filepath.Base(os.Args[0]) == "kubectl-restarts" {
		args = append([]string{"status"}, args...)
	}
	code := dispatch(ctx, args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return runVersion(ctx, args[1:])
	}
	for _, sc := range subcommands {
		if sc.name == args[0] {
			return sc.run(ctx, args[1:])
		}
	}
	fmt.Fprintf(stderr, "restart-injector: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}
