// Command pause is the pod sandbox's init process for the end-to-end cluster:
// no registry is reachable, so the harness builds it statically and imports
// it into containerd as the sandbox image. It sleeps until SIGINT or SIGTERM
// and reaps any orphaned child that is reparented to it as PID 1.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
