// Command restart-injector rewrites Kubernetes pods and workload templates so
// that containers carrying restart rules run under restart-supervisor. The
// offline tools (inject, uninject, explain, docker-args, compose), the admission
// webhook (serve), the node agent (node-agent) and its kubectl view (status)
// share one binary; the subcommands table below lists them all, and
// each lives in its own file.
//
// Exit codes: 0 success; 1 failure (invalid rules, unresolvable image,
// unreadable input, server error); 2 usage error (unknown subcommand or flag).
// docs/injector.md ("Exit codes of every command") has the table.
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

// stdio is what a subcommand reads and writes: the process's own, or a
// test's buffers, or nothing while completion collects the flag sets.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

type subcommand struct {
	name    string
	summary string // one line, shown in the usage text
	run     func(ctx context.Context, args []string, std stdio) int
}

// subcommands is every command of the binary, in the order the usage text
// lists them.
var subcommands = []subcommand{
	{"check", "check the webhook, and whether a pod would be injected, its node agent and its path (native or supervised)",
		func(ctx context.Context, args []string, std stdio) int {
			return runCheck(ctx, args, std.in, std.out, std.err)
		}},
	{"compose", "rewrite a Docker Compose file so services with restart rules run under restart-supervisor",
		func(ctx context.Context, args []string, std stdio) int {
			return runCompose(ctx, args, std.in, std.out, std.err)
		}},
	{"docker-args", "print the docker run arguments that run an image under restart-supervisor",
		func(ctx context.Context, args []string, std stdio) int {
			return dockerArgs(ctx, args, std.in, std.out, std.err)
		}},
	{"explain", "print, per container, what each exit code leads to once injected",
		func(ctx context.Context, args []string, std stdio) int {
			return runExplain(args, std.in, std.out, std.err)
		}},
	{"inject", "rewrite manifests so containers with restart rules run under restart-supervisor",
		func(ctx context.Context, args []string, std stdio) int {
			return runInject(ctx, args, std.in, std.out, std.err)
		}},
	{"node-agent", "record Events and serve metrics of the in-place restarts on this node (DaemonSet)",
		func(ctx context.Context, args []string, std stdio) int { return runNodeAgent(ctx, args, std.err) }},
	{"serve", "run the mutating admission webhook (HTTPS)",
		func(ctx context.Context, args []string, std stdio) int { return runServe(ctx, args, std.err) }},
	{"status", "print the in-place restarts of supervised containers from the node agent's Events",
		func(ctx context.Context, args []string, std stdio) int { return runStatus(ctx, args, std.out, std.err) }},
	{"uninject", "revert what inject did, from the record it left on each object",
		func(ctx context.Context, args []string, std stdio) int {
			return runUninject(ctx, args, std.in, std.out, std.err)
		}},
	{"version", "print the version, Go version and platform",
		func(ctx context.Context, args []string, std stdio) int {
			return runVersion(ctx, args, std.out, std.err)
		}},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: restart-injector COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, sc := range subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintln(w, "\nRun 'restart-injector COMMAND -h' for the flags of a command; --version is the version command.")
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
	// kubectl's completion of the plugin: kubectl runs a
	// kubectl_complete-restarts link with the words typed so far.
	var code int
	if filepath.Base(os.Args[0]) == "kubectl_complete-restarts" {
		code = runPluginCompletion(ctx, args, os.Stdout)
	} else {
		code = dispatch(ctx, args, stdio{os.Stdin, os.Stdout, os.Stderr})
	}
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, std stdio) int {
	if len(args) == 0 {
		usage(std.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(std.out)
		return exitOK
	case "--version", "-version":
		return runVersion(ctx, args[1:], std.out, std.err)
	}
	for _, sc := range subcommands {
		if sc.name == args[0] {
			return sc.run(ctx, args[1:], std)
		}
	}
	fmt.Fprintf(std.err, "restart-injector: unknown command %q\n", args[0])
	usage(std.err)
	return exitUsage
}
