package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// runVersion prints the line `restart-supervisor version` prints, from the
// same stamped variable, so that the injector and the supervisor of one
// build can be matched.
func runVersion(_ context.Context, args []string) int {
	if len(args) > 0 {
		fmt.Fprintln(os.Stderr, "usage: restart-injector version")
		return exitUsage
	}
	fmt.Printf("restart-injector %s %s %s/%s\n", contract.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
