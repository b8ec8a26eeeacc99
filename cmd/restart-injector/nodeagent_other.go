//go:build !unix

package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// runNodeAgent where the node agent cannot run: it reads the kubelet's
// pods directory through Unix-only calls (package statevol), on a Linux
// node, in the DaemonSet's image.
func runNodeAgent(_ context.Context, _ []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "restart-injector node-agent: runs on a Linux node (the DaemonSet's image), not on %s\n", runtime.GOOS)
	return exitUsage
}
