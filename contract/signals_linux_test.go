package contract

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The table of Linux signals is golang.org/x/sys's on the Linux this runs
// on, name for name and number for number, and the named constants are
// its entries.
func TestLinuxSignalsAreTheSystems(t *testing.T) {
	for n := 1; n < 32; n++ {
		name := unix.SignalName(syscall.Signal(n))
		if got, ok := linuxSignals[name]; !ok || got != syscall.Signal(n) {
			t.Errorf("%s: table %d (%v), system %d", name, got, ok, n)
		}
	}
	if len(linuxSignals) != 31 {
		t.Errorf("%d names in the table, want the system's 31", len(linuxSignals))
	}
	for got, want := range map[syscall.Signal]syscall.Signal{sigINT: unix.SIGINT, sigABRT: unix.SIGABRT, sigKILL: unix.SIGKILL,
		sigTERM: unix.SIGTERM, sigCHLD: unix.SIGCHLD, sigSTOP: unix.SIGSTOP, sigIO: unix.SIGIO} {
		if got != want {
			t.Errorf("constant %d, system %d", got, want)
		}
	}
}
