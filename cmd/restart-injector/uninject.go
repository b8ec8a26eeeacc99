package main

import (
	"context"
	"fmt"
	"io"

	"github.com/restart-supervisor/restart-supervisor/manifests"
)

const uninjectUsage = `usage: restart-injector uninject -f FILE|DIR|- [-f ...] [flags]

Reverts what 'restart-injector inject' did: every object inject changed is
written back as it was before, from the record inject left on it
(annotation restart-supervisor.dev/uninject). Edits made since outside the
wrap are kept; a wrap edited by hand is refused, naming the object and the
field. Other documents are written back unchanged.

  restart-injector uninject -f deploy.injected.yaml -o deploy.yaml
`

func runUninject(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := newFlagSet("uninject")
	var files fileList
	fl.VarP(&files, "filename", "f", "manifest file, directory (read recursively) or - for stdin; repeatable")
	diff := fl.Bool("diff", false, "print a unified diff of input and output instead of the output")
	quiet := fl.BoolP("quiet", "q", false, "do not report reverted objects on stderr")
	var outFile outputFile
	fl.VarP(&outFile, "output", "o", "write the output to `FILE` (replaced whole, only on success) instead of stdout; not a format: the output keeps the input's YAML or JSON")
	keepGoing := fl.Bool("continue-on-error", false, "write documents that cannot be read or reverted back unchanged, report them as warnings and exit 0; without it every such document is reported and nothing is written")
	if code, ok := parseFlags(fl, "uninject", args, uninjectUsage, stderr); !ok {
		return code
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "restart-injector uninject: unexpected argument %q (use -f)\n", fl.Arg(0))
		return exitUsage
	}
	if len(files) == 0 {
		fmt.Fprintln(stderr, "restart-injector uninject: -f is required (a file, a directory or - for stdin)")
		return exitUsage
	}
	run := streamRun{name: "uninject", files: files, stdin: stdin, stdout: stdout, stderr: stderr,
		outFile: string(outFile), diff: *diff, keepGoing: *keepGoing, diffLabel: "uninjected"}
	return run.run(func(r io.Reader, w io.Writer, emit func(*manifests.Document, []manifests.ObjectReport)) error {
		return manifests.UninjectStream(ctx, r, w, emit)
	}, func(name string, r manifests.ObjectReport) {
		for _, w := range r.Warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", name, w)
		}
		if r.Injected && !*quiet {
			fmt.Fprintf(stderr, "%s: %s uninjected\n", name, r.Object)
		}
	})
}
