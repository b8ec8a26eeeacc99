// Command restart-injector rewrites Kubernetes pods and workload templates so
// that containers carrying restart rules run under restart-supervisor. Each
// subcommand lives in its own file and registers itself in init(), so the
// offline tools (inject, explain) and the admission webhook share one binary.
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
	"sort"
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
	summary string
	run     func(ctx context.Context, args []string) int
}

var subcommands = map[string]subcommand{}

// register adds a subcommand. It is called from init() in the file that
// implements the subcommand; a duplicate name is a programming error.
func register(name, summary string, run func(ctx context.Context, args []string) int) {
	if _, dup := subcommands[name]; dup {
		panic("restart-injector: subcommand registered twice: " + name)
	}
	subcommands[name] = subcommand{name, summary, run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: restart-injector COMMAND [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, subcommands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'restart-injector COMMAND -h' for the flags of a command.")
	fmt.Fprintln(w, "Exit status: 0 ok, 1 failure (invalid rules, unresolvable image, I/O), 2 usage error.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
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
	}
	sc, ok := subcommands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "restart-injector: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return sc.run(ctx, args[1:])
}
