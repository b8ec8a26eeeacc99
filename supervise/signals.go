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

func isForwarded(sig syscall.Signal) bool {
	for _, s := range forwardedSignals {
		if s == sig {
			return true
		}
	}
	return false
}

// The real-time signal range as container runtimes number it (moby's
// signal package, which containerd uses for STOPSIGNAL and the kubelet's
// lifecycle.stopSignal): glibc keeps 32 and 33 for itself.
const (
	sigRTMin = 34
	sigRTMax = 64
)

// signalAliases are the names Kubernetes accepts as a stop signal
// (supportedStopSignalsLinux in pkg/apis/core/validation, v1.33 to v1.36)
// that golang.org/x/sys does not know.
var signalAliases = map[string]syscall.Signal{"SIGCLD": unix.SIGCHLD, "SIGIOT": unix.SIGABRT, "SIGPOLL": unix.SIGIO}

// ParseSignal accepts a signal name with or without the SIG prefix, in any
// case, or a number, including every name Kubernetes accepts as a stop
// signal: the aliases SIGCLD, SIGIOT and SIGPOLL, and SIGRTMIN, SIGRTMIN+N,
// SIGRTMAX-N and SIGRTMAX.
func ParseSignal(name string) (syscall.Signal, bool) {
	n := 0
	digits := len(name) > 0
	for _, c := range name {
		if c < '0' || c > '9' {
			digits = false
			break
		}
		n = n*10 + int(c-'0')
		if n > 64 {
			return 0, false
		}
	}
	if digits {
		if n < 1 {
			return 0, false
		}
		return syscall.Signal(n), true
	}
	up := make([]byte, 0, len(name)+3)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = append(up, c)
	}
	name = string(up)
	if len(name) < 3 || name[:3] != "SIG" {
		name = "SIG" + name
	}
	if s, ok := signalAliases[name]; ok {
		return s, true
	}
	if s, ok := realtimeSignal(name); ok {
		return s, true
	}
	s := unix.SignalNum(name)
	return s, s != 0
}

// realtimeSignal parses SIGRTMIN, SIGRTMIN+N, SIGRTMAX-N and SIGRTMAX.
func realtimeSignal(name string) (syscall.Signal, bool) {
	var base, sign int
	switch {
	case len(name) >= 8 && name[:8] == "SIGRTMIN":
		base, sign, name = sigRTMin, 1, name[8:]
	case len(name) >= 8 && name[:8] == "SIGRTMAX":
		base, sign, name = sigRTMax, -1, name[8:]
	default:
		return 0, false
	}
	if name == "" {
		return syscall.Signal(base), true
	}
	if (sign > 0 && name[0] != '+') || (sign < 0 && name[0] != '-') || len(name) < 2 || len(name) > 3 {
		return 0, false
	}
	n := 0
	for _, c := range name[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	s := base + sign*n
	if s < sigRTMin || s > sigRTMax {
		return 0, false
	}
	return syscall.Signal(s), true
}
