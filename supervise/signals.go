package supervise

import (
	"os"
	"syscall"
	"time"

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

func (s *supervisor) onSignal(sig syscall.Signal) {
	if sig == unix.SIGCHLD {
		s.reap()
		return
	}
	if s.stop[sig] {
		s.onStop(sig)
		return
	}
	if sig == s.o.TerminatingSignal {
		s.onTerminating()
		return
	}
	if !isForwarded(sig) {
		return // caught only, see caughtSignals
	}
	if s.proc == nil {
		s.log.Debug("no workload is running; signal dropped", "signal", unix.SignalName(sig))
		return
	}
	s.deliver(sig)
}

// stopRun is the one place that stops the running workload, for the
// reason already in s.ending: sig, then SIGKILL to what is left of its
// process group once grace has passed. A pod restart's and a probe's kill
// (re)start the grace period (rearm); a stop keeps one under way, the
// shorter wait the workload was already given, and with no grace period
// set leaves the kill to the runtime's own SIGKILL.
func (s *supervisor) stopRun(sig syscall.Signal, grace time.Duration, rearm bool) {
	s.deliver(sig)
	if rearm || grace > 0 && !s.grace.armed() {
		s.grace.arm(s.proc.pid, grace)
	}
}

// deliver passes a signal from outside on to the running workload.
func (s *supervisor) deliver(sig syscall.Signal) {
	if !s.o.InitSignals {
		s.forward(s.proc.pid, sig)
		return
	}
	if !catches(s.proc.pid, sig) {
		s.log.Debug("the workload has no handler for the signal; dropped, as for a PID namespace's init", "signal", unix.SignalName(sig))
		return
	}
	if err := unix.Kill(s.proc.pid, sig); err != nil && err != unix.ESRCH {
		s.log.Warn("cannot forward signal", "signal", unix.SignalName(sig), "pid", s.proc.pid, "err", err)
	}
}

// forward sends sig to the whole process group, so that a shell's jobs get
// it too (a shell does not pass SIGINT on to a foreground job). ESRCH
// means the group is already gone; its exit arrives through SIGCHLD.
func (s *supervisor) forward(pgid int, sig syscall.Signal) {
	if err := unix.Kill(-pgid, sig); err != nil && err != unix.ESRCH {
		s.log.Warn("cannot forward signal", "signal", unix.SignalName(sig), "pgid", pgid, "err", err)
	}
}

// onStop handles a request to stop the container. It never leads to a
// restart. With no workload running (backoff or hold) there is nothing to
// wait for, so we exit at once with the last run's status.
func (s *supervisor) onStop(sig syscall.Signal) {
	first := !s.stopping
	s.stopping = true
	s.disarmProbes()
	s.wait.leave()
	switch {
	case s.proc != nil:
		// A stop takes the place of a pod restart's or a probe's kill:
		// its exit ends supervision.
		s.ending = ending{cause: endStop}
		if first {
			s.log.Info("stop requested; forwarding to the workload", "signal", unix.SignalName(sig), "pid", s.proc.pid, "gracePeriod", s.o.GracePeriod)
		}
		s.stopRun(sig, s.o.GracePeriod, false)
		s.changed()
	default:
		s.log.Info("stop requested while no workload runs", "signal", unix.SignalName(sig))
		s.finish(s.lastStatus())
	}
}

// onTerminating handles the kubelet's beginning to stop this container
// instance, which its preStop hook reports before it runs the container's
// own hook (restart-probe prestop): a pod's deletion (or eviction), or a
// stop the kubelet restarts the container after (an in-place resize with
// RestartContainer, a changed image). The stop signal follows once the
// hook is done, but what happens before it is already the kubelet's: a
// pod marked for deletion has no container restarted
// (pkg/kubelet/container/helpers.go ShouldContainerBeRestarted, v1.37.2),
// its liveness and startup probes stop (pkg/kubelet/prober/worker.go
// doProbe, "Pod deletion requested, setting probe result to success") and
// it starts no pod-wide restart (the pod worker syncs a pod whose
// termination was requested with SyncTerminatingPod, which only stops
// containers, pkg/kubelet/pod_workers.go); any other stop ends the
// instance. So the
// workload's exit from here on ends supervision unjudged, as a stop's
// does (a workload that a preStop makes exit 42 is not restarted under
// Restart In [42]), and with no workload running (back-off, hold, a pod
// restart's round) there is no container to stop natively: the
// supervisor exits at once with the last run's status, and the hook's
// own part is not run (restart-probe prestop sees the exit).
func (s *supervisor) onTerminating() {
	if s.terminating || s.exited {
		return
	}
	s.terminating = true
	s.disarmProbes()
	if s.proc == nil {
		s.log.Info("the kubelet is stopping the container while no workload runs; exiting with the last run's status", "status", s.lastStatus())
		s.finish(s.lastStatus())
		return
	}
	// A probe's or a pod restart's kill under way ends the run all the
	// same; its exit now ends supervision.
	s.ending = ending{cause: endStop}
	s.log.Info("the kubelet is stopping the container; the workload's exit will not be restarted", "pid", s.proc.pid)
	s.changed()
}

// grace is the SIGKILL that follows a stop signal once its grace period
// is over: a stop's, a pod restart's or a probe kill's.
type grace struct {
	timer *time.Timer // nil when disarmed
	pgid  int
	d     time.Duration
}

// C is the timer's channel, nil when disarmed.
func (g *grace) C() <-chan time.Time { return timerC(g.timer) }

func (g *grace) armed() bool { return g.timer != nil }

// arm (re)starts the grace period d of process group pgid.
func (g *grace) arm(pgid int, d time.Duration) {
	if g.timer != nil {
		g.timer.Stop()
	}
	*g = grace{timer: time.NewTimer(d), pgid: pgid, d: d}
}

func (g *grace) disarm() {
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
}

func (s *supervisor) onGraceExpired() {
	s.grace.timer = nil
	s.log.Warn("grace period expired; killing the workload's process group", "pgid", s.grace.pgid, "gracePeriod", s.grace.d)
	s.forward(s.grace.pgid, unix.SIGKILL)
}
