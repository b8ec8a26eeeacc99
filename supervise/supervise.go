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
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
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

	// Config holds the restart rules, the pod policy and the backoff.
	Config rules.Config
	// Rules, when set, is called at every exit and its result used in
	// place of Config, so that a reloaded configuration decides each exit
	// from the moment it is in force.
	Rules func() rules.Config

	// GracePeriod is how long the workload may take to exit after a stop
	// signal before its process group is SIGKILLed. Zero or less sets no
	// timer: the container runtime's own SIGKILL at the end of its grace
	// period ends the workload.
	GracePeriod time.Duration
	// StartErrorCode, when not zero, is the exit code that a command that
	// cannot be executed is given, and that exit is then judged by the
	// rules like any other: containerd reports such a container as exited
	// with 128 (reason StartError) and the kubelet applies the rules to
	// it. Zero keeps the shell's convention: the supervisor exits at once
	// with 127 (not found) or 126 (not executable).
	StartErrorCode int
	// StopSignals ask for the container to stop; nil means
	// DefaultStopSignals. They are forwarded like any other signal, but
	// the workload is never restarted afterwards.
	StopSignals []syscall.Signal

	// Log receives the loop's log lines; nil discards them.
	Log Logger

	// PodRestartSignal stops the workload when a pod restart reaches this
	// container: the container's runtime stop signal, as the kubelet's
	// StopContainer sends it. Zero means SIGTERM.
	PodRestartSignal syscall.Signal

	// Pod, when set, carries out RestartAllContainers across the pod.
	// Without it such a rule restarts this container only (with backoff)
	// and says so in the log.
	Pod PodRestarter

	// Group, when set with Pod, asks the node agent for group restarts
	// (RestartGroup, group.go). Without it such a rule hands the exit
	// over.
	Group GroupRequester

	// OnChange, when set, is called from the supervising goroutine after
	// every change of State.
	OnChange func(State)

	// InitSignals delivers signals from outside as the kernel delivers
	// them to a PID namespace's init, which is what the workload is in a
	// container without the supervisor: to the workload's own process
	// only, and only when it has a handler installed for that signal. A
	// workload without a SIGTERM handler then ignores the runtime's stop
	// and is SIGKILLed at the end of the grace period (exit 137), as it
	// would be natively; by default it dies of SIGTERM at once (143), as
	// under tini. SIGKILL from the supervisor itself is not affected.
	InitSignals bool

	// ProbeCommand is the restart-probe binary that runs the httpGet,
	// tcpSocket and grpc checks of Config.Probes; empty, such checks fail.
	ProbeCommand string

	// InitRerun makes this the re-run of a regular init container in a
	// pod restart (contract.MemberInit; it needs Pod): upstream every
	// init container runs again, in order, before the containers after
	// it. The workload is not started at first (the kubelet has just run
	// the init container itself); in each pod restart it runs once the
	// members before it have started, and the container counts as
	// started for the round only when the run initialized it (exit 0
	// under Config, an init container's rules). In between the container
	// idles in phase Initialized. A run that fails for good is reported
	// with Pod.Failed, and the members after it then end (InitFailed).
	InitRerun bool

	// Resume, when set, is the container's back-off as an earlier
	// supervisor of the same container left it when it handed an exit
	// over to the kubelet. The kubelet keeps one CrashLoopBackOff per
	// container across all its exits; it counts only the exits it saw,
	// so the first start waits whatever the container's curve still asks
	// for, and the curve goes on from there.
	Resume *Resume

	// PodGeneration, when set, returns the pod restart generation the
	// next run belongs to, for the workload's environment
	// (contract.EnvPodRestartGeneration).
	PodGeneration func() uint64

	// Limits, when set, is what the limits of an earlier supervisor of
	// the same container left (State.Limits in its status document): the
	// restart budget, the progress count. The kubelet's restart resets
	// none of it.
	Limits *LimitState

	// MemoryEvents is the container's cgroup v2 memory.events file
	// (oom.go); empty, out-of-memory kills are not told from other
	// SIGKILLs.
	MemoryEvents string

	// ResourceFiles are the container cgroup's files whose contents are
	// the resources in the back-off's key (resources.go,
	// ContainerResourceFiles); none, a resize does not restart the curve.
	ResourceFiles []string

	// TerminatingSignal, when not zero and not a stop signal, tells the
	// supervisor that the kubelet has begun to stop this container
	// instance: the container's preStop hook (restart-probe prestop,
	// which the injector puts first in it) sends it before the rest of
	// the hook runs, so before the stop signal. See onTerminating.
	TerminatingSignal syscall.Signal

	// BeforeRestart, when set, is called before each in-place start (not
	// the first): what the kubelet would give a new container instance,
	// the supervisor's caller gives the next run (an empty termination
	// message file).
	BeforeRestart func()
}

// Resume is a container's back-off carried from one supervisor process to
// the next through the pod's state volume.
type Resume struct {
	// BackoffRestarts is State.BackoffRestarts when the earlier supervisor
	// exited, BackoffKey its State.BackoffKey.
	BackoffRestarts int
	BackoffKey      string
	// LastStart and LastExit bound the earlier supervisor's last run.
	LastStart, LastExit time.Time
	// Stopped: that run ended because the container was stopped (an
	// in-place resize with RestartContainer, an image change, a sandbox
	// re-created), not by a crash. The kubelet stops and starts such a
	// container in one sync, and doBackOff measures the back-off from the
	// last container instance that exited before it
	// (kuberuntime_manager.go, v1.37.2), never from the stop: the first
	// start is at once, and the curve goes on from BackoffRestarts without
	// a step for the stop.
	Stopped bool
}

// history is what the container's runs so far were, as State reports
// them; its counts are kept by recordRestart alone.
type history struct {
	last        *Exit // the last run's exit
	lastRestart *Exit // the exit the last in-place restart was from
	lastStart   time.Time
	restarts    int // all in-place restarts
	podRestarts int
}

// supervisor is the loop's state. What the loop is doing is phase(),
// derived from it, refined by two values that are each set where they
// change and read where they matter: ending, why the current run is
// ending, and wait, what the loop waits for while no run is in progress. The rest is the run itself
// (proc, its probes and its grace period), the container's back-off
// curve, its part in pod restarts, and the record the status document
// reports.
type supervisor struct {
	o    Options
	log  Logger
	tty  bool
	stop map[syscall.Signal]bool

	// stopping: a stop was requested (onStop); exited: supervision is
	// over (finish). With proc and wait they are what phase derives the
	// loop's phase from.
	stopping, exited bool
	ending           ending  // why the running workload is ending
	wait             waiting // what the loop waits for while no workload runs
	// terminating: the kubelet is stopping this container instance
	// (onTerminating); no exit is restarted from then on.
	terminating bool

	proc  *process // the running workload; nil in every other phase
	grace grace    // the SIGKILL that ends a stop or a kill

	backoff backoff // the container's curve, for restarts in place
	member  member  // this container's part in pod restarts (podround.go)

	hist   history // what the runs so far were
	result Result

	probes runProbes // the current run's probes (probe.go)

	// limits is what the limits remember (limits.go); handOver why the
	// last exit was handed over instead of restarted in place.
	limits   LimitState
	handOver *HandOver

	oom oomBaseline // the cgroup's OOM counter at the run's start (oom.go)

	// baseEnv is Options.Env without the attempt variables (attempt.go).
	baseEnv []string
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
		o.Log = Discard
	}
	if o.StopSignals == nil {
		o.StopSignals = DefaultStopSignals
	}
	if o.PodRestartSignal == 0 {
		o.PodRestartSignal = unix.SIGTERM
	}
	s := &supervisor{o: o, log: o.Log, stop: map[syscall.Signal]bool{}}
	if o.Limits != nil {
		s.limits = *o.Limits
		s.limits.BudgetRecent = append([]time.Time(nil), o.Limits.BudgetRecent...)
	}
	notify := HandledSignals()
	for _, sig := range o.StopSignals {
		s.stop[sig] = true
		notify = append(notify, sig)
	}
	if t := o.TerminatingSignal; t != 0 && !s.stop[t] {
		notify = append(notify, t)
	}
	// A burst of distinct signals must not overflow the channel; SIGCHLD
	// itself may coalesce, which the drain loop and the tick allow for.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, notify...)

	if err := becomeSubreaper(); err != nil {
		s.log.Warn("cannot become a child subreaper; orphaned processes will escape supervision", "err", err)
	}
	s.tty = ownsTerminal()
	s.probes.beats = make(chan struct{}, 1)
	if w := s.config().Watchdog; w != nil && w.OutputPattern != "" {
		taps, err := startTaps(&s.probes.pattern, s.probes.beats)
		if err != nil {
			s.log.Warn("cannot tap the workload's output; its pattern is not watched", "err", err)
		}
		if s.probes.taps = taps; !taps.tapped() {
			s.log.Warn("the workload's output is a terminal, which it keeps; the watchdog's outputPattern is not watched", "heartbeatFile", w.HeartbeatFile)
		}
	}

	s.resume()
	s.loop(sigs)
	s.probes.taps.close()
	return s.result
}

// loop serves signals, the reap tick, the timers, the pod's restarts and
// rounds, and the probes, one at a time, until supervision is over: as
// tini's loop, the one place where anything happens.
func (s *supervisor) loop(sigs <-chan os.Signal) {
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	for !s.exited {
		select {
		case sig := <-sigs:
			s.onSignal(sig.(syscall.Signal))
		case <-tick.C:
			s.reap()
		case <-s.wait.backoffC():
			s.wait = waiting{}
			s.start()
		case <-s.grace.C():
			s.onGraceExpired()
		case gen := <-s.podPending():
			s.onPodRestart(gen)
		case <-s.wait.roundReady():
			s.startRound()
		case <-s.wait.endedC():
			s.wait = waiting{}
			s.log.Info("the pod's other containers have ended; passing the workload's last status on", "status", s.lastStatus())
			s.finish(s.lastStatus())
		case <-s.wait.checkTimeoutC():
			s.onCheckTimeout()
		case <-s.wait.checkOutputC():
			s.onCheckOutput()
		case why := <-s.wait.groupRefusedC():
			s.onGroupAnswer(why)
		case <-s.wait.groupTimeoutC():
			s.onGroupAnswer("")
		case <-s.probes.startup.nextC():
			s.onProbeTick(s.probes.startup)
		case <-s.probes.liveness.nextC():
			s.onProbeTick(s.probes.liveness)
		case <-s.probes.startup.timeoutC():
			s.onProbeTimeout(s.probes.startup)
		case <-s.probes.liveness.timeoutC():
			s.onProbeTimeout(s.probes.liveness)
		case <-s.probes.dog.pollC():
			s.onHeartbeatPoll()
		case <-s.beatsC():
			s.onHeartbeat("output")
		case <-s.probes.dog.deadlineC():
			s.onStallDeadline()
		}
	}
}

func (s *supervisor) config() rules.Config {
	if s.o.Rules != nil {
		return s.o.Rules()
	}
	return s.o.Config
}

func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// phase is what the loop is doing, derived from its state, never stored:
// Exited once finish has run, Stopping once a stop was requested, else
// the phase of what the loop waits for (Running when it waits for
// nothing: a workload runs, or its exit is being decided).
func (s *supervisor) phase() contract.Phase {
	switch {
	case s.exited:
		return contract.PhaseExited
	case s.stopping:
		return contract.PhaseStopping
	}
	return s.wait.kind.phase()
}

// await makes the loop wait for w, in the phase of its kind.
func (s *supervisor) await(w waiting) {
	s.wait = w
	s.changed()
}

func (s *supervisor) changed() {
	if s.o.OnChange != nil {
		s.o.OnChange(s.state())
	}
}

func (s *supervisor) state() State {
	st := State{Phase: s.phase(), Restarts: s.hist.restarts, PodRestarts: s.hist.podRestarts, LastExit: s.hist.last, LastRestart: s.hist.lastRestart,
		StartedAt: s.hist.lastStart, BackoffRestarts: s.backoff.n, BackoffKey: s.backoff.key, HandOver: s.handOver, Terminating: s.terminating}
	st.Limits = s.limits
	st.Limits.BudgetRecent = append([]time.Time(nil), s.limits.BudgetRecent...)
	switch st.Phase {
	case contract.PhaseExited:
		st.Status = s.result.Status
	case contract.PhaseBackingOff:
		st.NextStartAt = s.wait.until
	}
	if s.proc != nil {
		st.PID = s.proc.pid
		st.Started = s.probes.started
	}
	// An init container's re-run between pod restarts has done its work,
	// and the containers after it may run.
	st.Started = st.Started || st.Phase == contract.PhaseInitialized
	return st
}

func (s *supervisor) start() {
	if s.hist.last != nil && s.o.BeforeRestart != nil {
		s.o.BeforeRestart()
	}
	s.readOOMBaseline()
	p, err := spawn(s.o.Path, s.o.Argv, s.attemptEnv(), s.probes.taps.files(), s.tty)
	if err != nil {
		s.onStartError(err.(*StartError))
		return
	}
	s.proc = p
	s.handOver = nil
	s.result.StartErr = nil
	s.hist.lastStart = p.started
	s.log.Info("workload started", "pid", p.pid, "command", s.o.Argv[0], "restarts", s.hist.restarts)
	s.armProbes()
	s.armWatchdog()
	s.changed()
}

// onStartError handles a command that could not be executed: either the
// shell's convention (exit 127/126 at once) or, with StartErrorCode, an
// exit with that code for the rules to judge, as under the kubelet.
func (s *supervisor) onStartError(se *StartError) {
	s.result.StartErr = se
	if s.o.StartErrorCode == 0 {
		s.log.Error("cannot start workload", "command", s.o.Argv[0], "err", se.Error(), "status", se.Status())
		s.finish(se.Status())
		return
	}
	s.log.Error("cannot start workload", "command", s.o.Argv[0], "err", se.Error(), "exitCode", s.o.StartErrorCode)
	now := time.Now()
	exit := &Exit{ExitStatus: ExitStatus{Code: s.o.StartErrorCode}, Rule: -1, At: now}
	s.hist.last = exit
	s.hist.lastStart = now
	v := s.judge(exit, 0)
	// Never restart from inside start(): with a zero backoff a command
	// that keeps failing would recurse. The timer goes through the loop,
	// where signals are still served.
	v.minDelay = time.Nanosecond
	s.act(v, exit, []any{"pid", 0, "exitCode", exit.Code, "ranFor", time.Duration(0)})
}

func (s *supervisor) finish(status int) {
	// A stop must leave nothing either: under a shared PID namespace
	// whatever survives us would live on under the pod's infrastructure
	// container.
	s.disarmProbes()
	s.clearRun(0)
	s.wait.leave()
	s.exited = true
	s.result.Status = status
	s.result.Restarts = s.hist.restarts
	args := []any{"status", status, "restarts", s.hist.restarts}
	if s.hist.last != nil && s.hist.last.Signal != 0 {
		args = append(args, "signal", unix.SignalName(s.hist.last.Signal))
	}
	s.log.Info("supervisor exiting", args...)
	s.changed()
}

func (s *supervisor) lastStatus() int {
	if s.hist.last == nil {
		return 0
	}
	return s.hist.last.Code
}

// clearRun kills everything left of the run led by pgid (0: of any run),
// so that the next run, or the container's end, finds nothing of it.
// Orphans it reaps on the way are dropped, as reap drops them.
func (s *supervisor) clearRun(pgid int) {
	if !killRemnants(pgid, func(reaped) {}) {
		s.log.Warn("processes of the previous run survived SIGKILL", "pgid", pgid, "waited", groupDrainTimeout)
	}
}

func (s *supervisor) reap() {
	var exited *ExitStatus
	var others []reaped
	reapAll(func(r reaped) {
		if s.proc != nil && r.pid == s.proc.pid {
			st := exitStatusOf(r.status)
			exited = &st
			return
		}
		others = append(others, r)
	})
	// The workload's exit first: it disarms the probes, so that a check
	// that ended with it is not taken for a verdict on a run that is over.
	if exited != nil {
		s.onWorkloadExit(*exited)
	}
	for _, r := range others {
		if !s.reapCheck(r.pid, r.status) {
			s.reapProbe(r.pid, r.status) // or an orphan, dropped
		}
	}
}
