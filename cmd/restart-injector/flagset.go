package main

import "flag"

// flagSetMade, when set, is told of every flag set a subcommand makes
// (a *flag.FlagSet, or status's *pflag.FlagSet). completion sets it and
// runs each subcommand with -h, which returns at Parse before the command
// does anything, so the scripts list the flags of the very flag sets the
// commands parse and cannot drift from them.
var flagSetMade func(fs any)

// newFlagSet is flag.NewFlagSet for a subcommand: errors are returned, not
// exits, and completion learns of the set.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if flagSetMade != nil {
		flagSetMade(fs)
	}
	return fs
}
