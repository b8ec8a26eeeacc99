package contract

import "syscall"

// Signal names are part of the contract: the injector and the Docker helper
// write the names that images and pod specs give (STOPSIGNAL,
// lifecycle.stopSignal), and the supervisor must read every one of them.

// linuxSignals are the signal numbers of Linux on the architectures
// Kubernetes nodes run (amd64, arm64, ppc64le, s390x: the generic
// numbering; not alpha, mips or sparc), whatever system reads them: the
// supervisor runs on Linux, and the injector's CLI on a laptop (macOS,
// whose numbers differ) writes and checks names for Linux containers.
// signals_linux_test.go holds the table to golang.org/x/sys's.
var linuxSignals = map[string]syscall.Signal{
	"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGILL": 4, "SIGTRAP": 5, "SIGABRT": 6, "SIGBUS": 7, "SIGFPE": 8,
	"SIGKILL": 9, "SIGUSR1": 10, "SIGSEGV": 11, "SIGUSR2": 12, "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15,
	"SIGSTKFLT": 16, "SIGCHLD": 17, "SIGCONT": 18, "SIGSTOP": 19, "SIGTSTP": 20, "SIGTTIN": 21, "SIGTTOU": 22,
	"SIGURG": 23, "SIGXCPU": 24, "SIGXFSZ": 25, "SIGVTALRM": 26, "SIGPROF": 27, "SIGWINCH": 28, "SIGIO": 29,
	"SIGPWR": 30, "SIGSYS": 31,
}

// The Linux signals this package names.
const (
	sigINT  = syscall.Signal(2)
	sigABRT = syscall.Signal(6)
	sigKILL = syscall.Signal(9)
	sigTERM = syscall.Signal(15)
	sigCHLD = syscall.Signal(17)
	sigSTOP = syscall.Signal(19)
	sigIO   = syscall.Signal(29)
)

// The real-time signal range as container runtimes number it (moby's
// signal package, which containerd uses for STOPSIGNAL and the kubelet's
// lifecycle.stopSignal): glibc keeps 32 and 33 for itself.
const (
	sigRTMin = 34
	sigRTMax = 64
)

// SignalTerminating is what `restart-probe prestop`, first in the preStop
// hook of every wrapped container, sends the supervisor to say that the
// kubelet has begun to stop the container (supervise.Options.
// TerminatingSignal). A real-time signal: the supervisor forwards none of
// them to the workload, so taking one takes nothing a workload received
// before. SIGRTMIN+10 as runtimes number them (44); a container whose
// stop signal it is takes it as the stop, which covers what it says.
const SignalTerminating = syscall.Signal(sigRTMin + 10)

// signalAliases are the names Kubernetes accepts as a stop signal
// (supportedStopSignalsLinux in pkg/apis/core/validation, v1.33 to v1.36)
// that golang.org/x/sys does not know.
var signalAliases = map[string]syscall.Signal{"SIGCLD": sigCHLD, "SIGIOT": sigABRT, "SIGPOLL": sigIO}

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
	s, ok := linuxSignals[name]
	return s, ok
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

// ExtraStopSignal returns the name to add to the supervisor's stop signals
// (EnvStopSignals, after SIGTERM and SIGINT) for a container whose runtime
// stop signal is name, and false when nothing is to be added: the name is
// empty, already SIGTERM or SIGINT, cannot be caught (SIGKILL and SIGSTOP
// end the supervisor itself, which is what the runtime then does to the
// whole container anyway), is SIGCHLD (a child's exit), or is not a signal
// the supervisor could parse.
func ExtraStopSignal(name string) (string, bool) {
	sig, ok := ParseSignal(name)
	if !ok {
		return "", false
	}
	switch sig {
	case sigTERM, sigINT, sigKILL, sigSTOP, sigCHLD:
		return "", false
	}
	return name, true
}
