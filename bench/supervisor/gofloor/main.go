// Command gofloor is the smallest Go program that starts a command and
// waits for it (ForkExec + wait4). Its start overhead is the floor for any
// supervisor written in Go: the runtime's own start-up.
package main

import (
	"os"
	"syscall"
)

func main() {
	argv := os.Args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		os.Exit(127)
	}
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	os.Exit(ws.ExitStatus())
}
