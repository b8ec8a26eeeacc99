// Package supervise owns the workload process of a container: it starts
// the command in its own process group, forwards signals to that group,
// reaps every child that reaches it (as PID 1 or as a child subreaper),
// decides each exit with the rules package and then restarts the workload
// in place, hands the exit over to the kubelet, or holds the container,
// and it carries out a stop request with a grace period.
//
// One goroutine owns everything: signals, timers and wait4 are handled in
// a single select loop, so there is exactly one place where children are
// reaped and the workload's status can never be taken by anyone else. This
// is why the package does not use os/exec's Wait, os.Process.Wait or a
// reaper library such as github.com/ramr/go-reaper: a wait4(-1) reaper
// running next to any other waiter steals statuses from it
// (ramr/go-reaper#2, #11, #21), that library's WNOHANG mode spins while
// children run and its status channel drops exits when full. Here the
// loop drains wait4(-1, WNOHANG) until it reports 0 or ECHILD on every
// SIGCHLD and on a periodic tick (SIGCHLD coalesces, and a full signal
// buffer may drop one), and recognises the workload by its pid.
package supervise

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// reapInterval is the safety net for a lost SIGCHLD, as tini's 1 s
// sigtimedwait timeout.
const reapInterval = time.Second

// Options describe the workload and how to supervise it.
type Options struct {
	// Path is the executable (already looked up in PATH), Argv its
	// arguments with the command name first, Env its environment.
	Path string
	Argv []string
	Env  []string

	Config rules.Config

	// GracePeriod is how long the workload may take to exit after a stop
	// signal before its process group is SIGKILLed.
	GracePeriod time.Duration
	// StopSignals ask for the container to stop; nil means
	// DefaultStopSignals. They are forwarded like any other signal, but
	// the workload is never restarted afterwards.
	StopSignals []syscall.Signal

	Log *slog.Logger

	// RestartRequests are restarts asked for from outside the process
	// (the pod-wide RestartAllContainers generation). The running
	// workload gets SIGTERM, then SIGKILL after GracePeriod, and starts
	// again at once, whatever its exit code.
	RestartRequests <-chan RestartRequest

	// OnChange, when set, is called from the supervising goroutine after
	// every change of State.
	OnChange func(State)
}

// RestartRequest is a restart asked for from outside.
type RestartRequest struct{ Reason string }

// Phase is what the supervisor is doing.
type Phase string

const (
	Running    Phase = "Running"
	BackingOff Phase = "BackingOff"
	Holding    Phase = "Holding"
	Stopping   Phase = "Stopping"
	Exited     Phase = "Exited"
)

// State is a snapshot for status reporting.
type State struct {
	Phase    Phase
	PID      int // of the running workload, 0 when none runs
	Restarts int // in-place restarts so far
	LastExit *ExitStatus
	// StartedAt is when the current or last run started.
	StartedAt time.Time
	// FinishedAt is when the last run ended.
	FinishedAt time.Time
	// Status is the supervisor's exit status once Phase is Exited.
	Status int
}

// Result is how supervision ended.
type Result struct {
	// Status is the exit status the supervisor should exit with: the
	// workload's last status, or 126/127 when it could not be started.
	Status   int
	Restarts int
	// StartErr is set when the command could not be executed.
	StartErr *StartError
}

type supervisor struct {
	o    Options
	log  *slog.Logger
	tty  bool
	stop map[syscall.Signal]bool

	proc       *process
	last       *ExitStatus
	lastEnd    time.Time
	lastStart  time.Time
	restarts   int // all in-place restarts
	backoffN   int // restarts since the backoff was last reset
	stopping   bool
	holding    bool
	pending    *RestartRequest
	drainPgid  int // group left behind by a workload that exited during a stop
	backoff    *time.Timer
	grace      *time.Timer
	gracePgid  int
	done       bool
	result     Result
	reapedOrph int
}

// Run supervises the workload until it is over and returns the status to
// exit with. Signal handlers are installed before the first fork, so that
// neither an early stop request nor a fast child's SIGCHLD is lost; while
// Run runs, the calling process must start no other children.
//
// The handlers stay installed when Run returns: the caller is expected to
// exit with Result.Status at once, and a SIGTERM arriving in between must
// not replace that status with a death by signal. (Removing them would
// also cost a hand-off to the runtime's signal thread per signal.)
func Run(o Options) Result {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.StopSignals == nil {
		o.StopSignals = DefaultStopSignals
	}
	s := &supervisor{o: o, log: o.Log, stop: map[syscall.Signal]bool{}}
	notify := []os.Signal{unix.SIGCHLD}
	notify = append(notify, forwardedSignals...)
	notify = append(notify, caughtSignals...)
	for _, sig := range o.StopSignals {
		s.stop[sig] = true
		notify = append(notify, sig)
	}
	// A burst of distinct signals must not overflow the channel; SIGCHLD
	// itself may coalesce, which the drain loop and the tick allow for.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, notify...)

	if err := becomeSubreaper(); err != nil {
		s.log.Warn("cannot become a child subreaper; orphaned processes will escape supervision", "err", err)
	}
	s.tty = stdinIsControllingTTY()

	s.start()
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	for !s.done {
		select {
		case sig := <-sigs:
			s.onSignal(sig.(syscall.Signal))
		case <-tick.C:
			s.reap()
		case <-timerC(s.backoff):
			s.backoff = nil
			s.start()
		case <-timerC(s.grace):
			s.onGraceExpired()
		case req := <-o.RestartRequests:
			s.onRestartRequest(req)
		}
	}
	return s.result
}

func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

func (s *supervisor) changed() {
	if s.o.OnChange != nil {
		s.o.OnChange(s.state())
	}
}

func (s *supervisor) state() State {
	st := State{Restarts: s.restarts, LastExit: s.last, StartedAt: s.lastStart, FinishedAt: s.lastEnd}
	switch {
	case s.done:
		st.Phase, st.Status = Exited, s.result.Status
	case s.stopping:
		st.Phase = Stopping
	case s.proc != nil:
		st.Phase = Running
	case s.holding:
		st.Phase = Holding
	default:
		st.Phase = BackingOff
	}
	if s.proc != nil {
		st.PID = s.proc.pid
	}
	return st
}

func (s *supervisor) start() {
	p, err := spawn(s.o.Path, s.o.Argv, s.o.Env, s.tty)
	if err != nil {
		se := err.(*StartError)
		s.log.Error("cannot start workload", "command", s.o.Argv[0], "err", se.Error(), "status", se.Status())
		s.result.StartErr = se
		s.finish(se.Status())
		return
	}
	s.proc = p
	s.lastStart = p.started
	s.log.Info("workload started", "pid", p.pid, "command", s.o.Argv[0], "restarts", s.restarts)
	s.changed()
}

func (s *supervisor) finish(status int) {
	s.done = true
	s.result.Status = status
	s.result.Restarts = s.restarts
	args := []any{"status", status, "restarts", s.restarts}
	if s.last != nil && s.last.Signal != 0 {
		args = append(args, "signal", unix.SignalName(s.last.Signal))
	}
	s.log.Info("supervisor exiting", args...)
	s.changed()
}

func (s *supervisor) lastStatus() int {
	if s.last == nil {
		return 0
	}
	return s.last.Code
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
	if !isForwarded(sig) {
		return // caught only, see caughtSignals
	}
	if s.proc == nil {
		s.log.Debug("no workload is running; signal dropped", "signal", unix.SignalName(sig))
		return
	}
	s.forward(s.proc.pid, sig)
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
	if s.backoff != nil {
		s.backoff.Stop()
		s.backoff = nil
	}
	switch {
	case s.proc != nil:
		if first {
			s.log.Info("stop requested; forwarding to the workload", "signal", unix.SignalName(sig), "pid", s.proc.pid, "gracePeriod", s.o.GracePeriod)
		}
		s.forward(s.proc.pid, sig)
		if s.grace == nil {
			s.armGrace(s.proc.pid)
		}
		s.changed()
	case s.drainPgid != 0:
		s.forward(s.drainPgid, sig)
	default:
		s.log.Info("stop requested while no workload runs", "signal", unix.SignalName(sig))
		s.finish(s.lastStatus())
	}
}

func (s *supervisor) armGrace(pgid int) {
	if s.grace != nil {
		s.grace.Stop()
	}
	s.gracePgid = pgid
	s.grace = time.NewTimer(s.o.GracePeriod)
}

func (s *supervisor) disarmGrace() {
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
}

func (s *supervisor) onGraceExpired() {
	s.grace = nil
	s.log.Warn("grace period expired; killing the workload's process group", "pgid", s.gracePgid, "gracePeriod", s.o.GracePeriod)
	if s.drainPgid != 0 {
		killGroup(s.drainPgid, s.onOrphan)
		s.drainPgid = 0
		s.finish(s.lastStatus())
		return
	}
	s.forward(s.gracePgid, unix.SIGKILL)
}

func (s *supervisor) onOrphan(reaped) { s.reapedOrph++ }

func (s *supervisor) reap() {
	var exited *ExitStatus
	reapAll(func(r reaped) {
		if s.proc != nil && r.pid == s.proc.pid {
			st := exitStatusOf(r.status)
			exited = &st
			return
		}
		s.reapedOrph++
	})
	if exited != nil {
		s.onWorkloadExit(*exited)
	}
	if s.drainPgid != 0 && !groupAlive(s.drainPgid) {
		s.drainPgid = 0
		s.disarmGrace()
		s.finish(s.lastStatus())
	}
}

func (s *supervisor) onWorkloadExit(st ExitStatus) {
	p := s.proc
	s.proc = nil
	s.last = &st
	s.lastEnd = time.Now()
	ran := s.lastEnd.Sub(p.started)

	if s.stopping {
		// The rest of the group got the stop signal too; let it finish
		// within what is left of the grace period, then exit.
		s.log.Info("workload exited after a stop request", exitAttrs(p.pid, st, ran)...)
		if groupAlive(p.pid) {
			s.drainPgid = p.pid
			s.changed()
			return
		}
		s.disarmGrace()
		s.finish(st.Code)
		return
	}
	s.disarmGrace()
	// Nothing a finished run started may outlive it: it could hold ports,
	// files or the terminal the next run needs.
	if !killGroup(p.pid, s.onOrphan) {
		s.log.Warn("processes of the previous run survived SIGKILL", "pgid", p.pid, "waited", groupDrainTimeout)
	}

	if req := s.pending; req != nil {
		s.pending = nil
		s.restarts++
		s.log.Info("workload exited; restarting on request", append(exitAttrs(p.pid, st, ran), "reason", req.Reason, "restarts", s.restarts)...)
		s.start()
		return
	}

	d, h := rules.Plan(s.o.Config.Container, s.o.Config.Pod(), int32(st.Code))
	attrs := append(exitAttrs(p.pid, st, ran),
		"rule", d.Rule, "action", string(d.Action), "decidedBy", string(d.Source), "handling", h.String())
	switch h {
	case rules.HandOver:
		s.log.Info("workload exited; leaving the decision to the kubelet", append(attrs, "restarts", s.restarts)...)
		s.finish(st.Code)
	case rules.Hold:
		s.holding = true
		s.log.Warn("workload exited and must not restart, but the pod's restartPolicy would make the kubelet restart the container; holding the container idle until it is stopped",
			append(attrs, "restarts", s.restarts, "podRestartPolicy", string(s.o.Config.Pod()))...)
		s.changed()
	case rules.RestartInPlace:
		if ran >= s.o.Config.Backoff.ResetAfterDuration() {
			s.backoffN = 0
		}
		delay := s.o.Config.Backoff.Delay(s.backoffN)
		s.backoffN++
		s.restarts++
		s.log.Info("workload exited; restarting in place", append(attrs, "restarts", s.restarts, "delay", delay)...)
		if d.Action == rules.ActionRestartAllContainers {
			s.log.Warn("RestartAllContainers: restarting this container only; the other containers of the pod were not restarted")
		}
		if delay <= 0 {
			s.start()
			return
		}
		s.backoff = time.NewTimer(delay)
		s.changed()
	}
}

func exitAttrs(pid int, st ExitStatus, ran time.Duration) []any {
	a := []any{"pid", pid, "exitCode", st.Code}
	if st.Signal != 0 {
		a = append(a, "signal", unix.SignalName(st.Signal))
	}
	return append(a, "ranFor", ran.Round(time.Millisecond))
}

func (s *supervisor) onRestartRequest(req RestartRequest) {
	if s.stopping || s.done {
		return
	}
	switch {
	case s.proc != nil:
		if s.pending != nil {
			return
		}
		s.pending = &req
		s.log.Info("restart requested; stopping the workload", "reason", req.Reason, "pid", s.proc.pid, "gracePeriod", s.o.GracePeriod)
		s.forward(s.proc.pid, unix.SIGTERM)
		s.armGrace(s.proc.pid)
	default:
		if s.backoff != nil {
			s.backoff.Stop()
			s.backoff = nil
		}
		s.holding = false
		s.restarts++
		s.log.Info("restart requested; starting the workload", "reason", req.Reason, "restarts", s.restarts)
		s.start()
	}
}
