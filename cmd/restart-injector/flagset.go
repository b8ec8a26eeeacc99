package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// flagSetMade, when set, is told of every flag set a subcommand makes.
// completion sets it and runs each subcommand with -h, which returns at
// Parse before the command does anything, so the scripts list the flags of
// the very flag sets the commands parse and cannot drift from them.
var flagSetMade func(fs *pflag.FlagSet)

// newFlagSet is a subcommand's flag set: pflag's, as kubectl's and every
// kubectl plugin's (--long and -s, -n NS and --namespace=NS, flags before,
// between and after the arguments, -- ending them). parseFlags parses it.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}

// parseFlags parses args into fs for the subcommand cmd. -h and --help
// print usage (the command's own lines) and the flags to stderr and end
// the command with exitOK; a bad flag is one line naming it and how to list
// the flags, and exitUsage, never the whole usage after it. ok false: the
// command returns code.
//
// A long flag written with one dash (-no-lookup), which this tool's
// commands took before they used pflag, is read as the same flag with two:
// pflag would read it as the shorthands n, o, ... Only names the set
// defines are rewritten, so a shorthand with its value attached (-ojson)
// is left as it is.
func parseFlags(fs *pflag.FlagSet, cmd string, args []string, usage string, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	args = twoDashes(fs, args)
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprint(stderr, usage)
		fmt.Fprint(stderr, "\nflags:\n"+fs.FlagUsages())
		return exitOK, false
	}
	if err != nil {
		fmt.Fprintf(stderr, "restart-injector %s: %v (restart-injector %s -h lists the flags)\n", cmd, err, cmd)
		return exitUsage, false
	}
	return 0, true
}

// twoDashes rewrites -name and -name=value to --name... where name is a
// long flag of fs longer than one letter, up to a "--".
func twoDashes(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// positionalsAndRest splits what fs left after Parse: the arguments before
// a "--" and, with hasRest, the ones after it.
func positionalsAndRest(fs *pflag.FlagSet) (positional, rest []string, hasRest bool) {
	args := fs.Args()
	if at := fs.ArgsLenAtDash(); at >= 0 {
		return args[:at], args[at:], true
	}
	return args, nil, false
}
