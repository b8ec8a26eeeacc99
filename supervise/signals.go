package supervise

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are passed on to the workload's process group. The list
// follows tini: every catchable signal except the ones the kernel raises
// synchronously for a fault of the receiving process (SEGV, BUS, FPE, ILL,
// TRAP, SYS, ABRT), the resource-limit signals our own writes could raise
// (XCPU, XFSZ), SIGPIPE (raised by our own log writes), SIGPROF (the
// runtime's profiler), SIGCHLD and the terminal stop signals for background
// reads and writes. SIGURG is absent on purpose: the Go runtime sends it to
// itself to preempt goroutines, hundreds of times a second under load, and
// forwarding it would shower the workload with signals it never asked for.
//
// Real-time signals (34..64) are not forwarded, as in dumb-init: nothing
// uses them to control a container, and every signal handed to
// signal.Notify costs a round trip to the runtime's signal-mask thread at
// start-up (31 more signals measured as about 1 ms of start overhead).
var forwardedSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGCONT, unix.SIGTSTP,
	unix.SIGVTALRM, unix.SIGWINCH, unix.SIGIO, unix.SIGPWR,
}

// caughtSignals are taken away from their default action but not
// forwarded. SIGTTIN/SIGTTOU: the supervisor must never be stopped for
// touching a terminal it no longer has in the foreground. They are caught
// rather than ignored because an ignored disposition survives exec and the
// workload would inherit it; a caught one is reset to the default in the
// child. The child takes the terminal (TIOCSPGRP) while all its signals are
// still blocked, so it does not need SIGTTOU ignored either. SIGPIPE: a
// closed stderr must cost us a log line, not our life.
var caughtSignals = []os.Signal{unix.SIGTTIN, unix.SIGTTOU, unix.SIGPIPE}

// DefaultStopSignals are the signals that ask the container to stop: the
// kubelet's default stop signal and Ctrl-C.
var DefaultStopSignals = []syscall.Signal{unix.SIGTERM, unix.SIGINT}

// HandledSignals are the signals Run hands to signal.Notify before its
// first fork, besides the stop signals: SIGCHLD, the forwarded and the
// caught ones. Each costs a round trip to the runtime's signal-mask thread,
// which makes them part of every start; bench/supervisor/depsfloor keeps a
// copy (checked by its test) to measure that cost without the supervisor.
func HandledSignals() []os.Signal {
	s := []os.Signal{unix.SIGCHLD}
	s = append(s, forwardedSignals...)
	return append(s, caughtSignals...)
}

func isForwarded(sig syscall.Signal) bool {
	for _, s := range forwardedSignals {
		if s == sig {
			return true
		}
	}
	return false
}
