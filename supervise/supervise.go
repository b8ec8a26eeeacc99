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
}

// Resume is a container's back-off carried from one supervisor process to
// the next through the pod's state volume.
type Resume struct {
	// BackoffRestarts is State.BackoffRestarts when the earlier supervisor
	// exited.
	BackoffRestarts int
	// LastStart and LastExit bound the earlier supervisor's last run.
	LastStart, LastExit time.Time
}

// PodRestarter connects the loop to pod-wide restarts (KEP-5532
// RestartAllContainers). Its methods are called from the supervising
// goroutine at the moment an exit or a pod restart is handled, which is
// what makes each pod restart restart this workload exactly once: an exit
// handled first announces and joins the pod restart, so the same
// generation is then not accepted again; a pod restart handled first stops
// the workload, and the exit that the stop causes is neither judged by the
// rules nor announced.
//
// A pod restart is a round, as the kubelet runs it: every member stops,
// then they start again in the pod's order. The supervisor stops its
// workload, calls Stopped, and starts the workload when the channel
// Stopped returns is closed.
type PodRestarter interface {
	// Announce asks every container of the pod to restart because this
	// workload exited with exitCode under a RestartAllContainers rule, and
	// returns the generation the workload's next run belongs to (the one
	// it created, or the one already under way). On an error the workload
	// is restarted alone, with the container's back-off.
	Announce(exitCode int32) (gen uint64, err error)
	// Pending delivers pod restarts (generation numbers) announced by any
	// container of the pod, including this one.
	Pending() <-chan uint64
	// Accept reports whether generation gen asks this workload to restart.
	Accept(gen uint64) bool
	// Stopped records that this workload is stopped for generation gen and
	// returns a channel that is closed when it may start again: not before
	// notBefore (the pod restart's back-off), and once the other members
	// have stopped and, for a regular container, the sidecars run again
	// (each wait bounded). cancel stops waiting, for a newer generation or
	// a stop; the channel is then never closed.
	Stopped(gen uint64, notBefore time.Time) (ready <-chan struct{}, cancel func())
	// Started records that the run of generation gen has started.
	Started(gen uint64)
	// Failed records that this container's run of generation gen failed
	// for good (InitRerun only): the members after it must not start.
	Failed(gen uint64)
	// OthersEnded returns, for a regular member of a pod whose other
	// regular members may still run, a channel closed once each of them
	// has ended or waits in Ended too; nil when there is no one to wait
	// for. cancel stops the wait (a pod restart or a stop came first).
	OthersEnded() (ended <-chan struct{}, cancel func())
	// InitFailed reports whether the re-run of an init container before
	// this one failed for good in generation gen, and its exit code:
	// upstream the pod then fails, so this member ends instead of
	// starting.
	InitFailed(gen uint64) (exitCode int, failed bool)
}

// Phase is what the supervisor is doing. Its values are also the "state"
// of the container's status document (package podstate), so that a phase
// has one name wherever it is shown.
type Phase string

const (
	// Running: the workload runs.
	Running Phase = "running"
	// BackingOff: the workload exited and waits for its next start.
	BackingOff Phase = "backoff"
	// Holding: the workload exited for good, but the supervisor keeps the
	// container alive because the kubelet would restart it otherwise.
	Holding Phase = "held"
	// Ended: the workload exited for good, with nothing to restart it,
	// in a pod whose other regular containers still run. Upstream a
	// pod restart (RestartAllContainers) restarts a container that has
	// ended too, so the supervisor keeps the container until the last
	// of them has ended, a pod restart restarts it, or a stop.
	Ended Phase = "ended"
	// Initialized: the re-run of an init container (Options.InitRerun)
	// has nothing to do until the next pod restart: the pod has just
	// started, or the last re-run initialized the container.
	Initialized Phase = "initialized"
	// Stopping: a stop was requested; no restart follows. The workload, or
	// what is left of its process group, is finishing within the grace
	// period.
	Stopping Phase = "stopping"
	// Exited: supervision is over; State.Status is the exit status.
	Exited Phase = "exited"
)

// Exit is one exit of the workload and what was decided on it.
type Exit struct {
	ExitStatus
	// Rule is the index of the first matching rule, -1 when none matched
	// or the exit was not judged by the rules (a stop, a pod restart).
	Rule   int
	Action rules.Action
	// PodRestart is the pod restart generation whose kill ended this run,
	// 0 when the workload ended on its own.
	PodRestart uint64
	At         time.Time
}

// State is a snapshot for status reporting.
type State struct {
	Phase       Phase
	PID         int // of the running workload, 0 when none runs
	Restarts    int // in-place restarts so far, all causes
	PodRestarts int // how many of them were pod restarts
	LastExit    *Exit
	// LastRestart is the exit that caused the most recent in-place restart.
	LastRestart *Exit
	// StartedAt is when the current or last run started.
	StartedAt time.Time
	// NextStartAt is when a workload in backoff starts again.
	NextStartAt time.Time
	// Status is the supervisor's exit status once Phase is Exited.
	Status int
	// Started: the workload runs and its startup probe, when it has one,
	// has succeeded in this run.
	Started bool
	// BackoffRestarts counts the restarts in the current back-off window
	// (the kubelet's CrashLoopBackOff count): the next restart waits
	// Backoff.Delay(BackoffRestarts).
	BackoffRestarts int
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
	log  Logger
	tty  bool
	stop map[syscall.Signal]bool

	// phase is set at every transition and nowhere inferred: start sets
	// Running, a restart with a delay BackingOff, a hold Holding, a stop
	// request Stopping, finish Exited.
	phase       Phase
	proc        *process // the running workload; nil in every other phase
	last        *Exit
	lastRestart *Exit
	lastStart   time.Time
	nextStart   time.Time
	restarts    int // all in-place restarts
	podRestarts int
	backoffN    int     // restarts since the backoff was last reset
	pending     *uint64 // pod restart generation awaiting the workload's exit
	// round is the pod restart the stopped workload waits to start in.
	round *podRound
	// podBackoffN counts pod restarts since their back-off was last reset.
	podBackoffN int
	backoff     *time.Timer
	grace       *time.Timer
	gracePgid   int
	graceFor    time.Duration
	result      Result
	reapedOrph  int

	// The probes of the current run (probe.go): armed at every start,
	// disarmed at every exit. started is false while a startup probe has
	// not yet succeeded; probeKill is set while a probe failure stops the
	// workload.
	startup, liveness *prober
	started           bool
	probeKill         *probeKill
	probeKills        int
	// roundStarted is the pod restart whose start is reported to the
	// round once the startup probe of this run has succeeded.
	roundStarted *uint64
	// ended is closed when the pod's other regular members have ended
	// (phase Ended); endedCancel stops that wait.
	ended       <-chan struct{}
	endedCancel func()
	// rerunGen is the pod restart an init container's re-run
	// (Options.InitRerun) serves; its start is reported once the run
	// initialized the container.
	rerunGen *uint64
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
	s := &supervisor{o: o, log: o.Log, stop: map[syscall.Signal]bool{}}
	notify := HandledSignals()
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
	s.tty = ownsTerminal()

	s.resume()
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	for s.phase != Exited {
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
		case gen := <-s.podPending():
			s.onPodRestart(gen)
		case <-s.roundReady():
			s.startRound()
		case <-s.ended:
			s.ended, s.endedCancel = nil, nil
			s.log.Info("the pod's other containers have ended; passing the workload's last status on", "status", s.lastStatus())
			s.finish(s.lastStatus())
		case <-s.startup.nextC():
			s.onProbeTick(s.startup)
		case <-s.liveness.nextC():
			s.onProbeTick(s.liveness)
		case <-s.startup.timeoutC():
			s.onProbeTimeout(s.startup)
		case <-s.liveness.timeoutC():
			s.onProbeTimeout(s.liveness)
		}
	}
	return s.result
}

func (s *supervisor) podPending() <-chan uint64 {
	if s.o.Pod == nil {
		return nil
	}
	return s.o.Pod.Pending()
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

func (s *supervisor) changed() {
	if s.o.OnChange != nil {
		s.o.OnChange(s.state())
	}
}

func (s *supervisor) state() State {
	st := State{Phase: s.phase, Restarts: s.restarts, PodRestarts: s.podRestarts, LastExit: s.last, LastRestart: s.lastRestart,
		StartedAt: s.lastStart, BackoffRestarts: s.backoffN}
	switch s.phase {
	case Exited:
		st.Status = s.result.Status
	case BackingOff:
		st.NextStartAt = s.nextStart
	}
	if s.proc != nil {
		st.PID = s.proc.pid
		st.Started = s.started
	}
	// An init container's re-run between pod restarts has done its work,
	// and the containers after it may run.
	st.Started = st.Started || s.phase == Initialized
	return st
}

func (s *supervisor) start() {
	p, err := spawn(s.o.Path, s.o.Argv, s.o.Env, s.tty)
	if err != nil {
		s.onStartError(err.(*StartError))
		return
	}
	s.phase, s.proc = Running, p
	s.result.StartErr = nil
	s.lastStart = p.started
	s.nextStart = time.Time{}
	s.log.Info("workload started", "pid", p.pid, "command", s.o.Argv[0], "restarts", s.restarts)
	s.armProbes()
	s.changed()
}

// resume makes the first start: at once, or, when an earlier supervisor of
// this container handed its last exit over to the kubelet, after what is
// left of the delay the container's back-off asks for. That delay is
// measured from the exit, as the kubelet's doBackOff measures it from the
// container's FinishedAt, and the kubelet's own wait, which counted fewer
// exits, has already used part of it.
func (s *supervisor) resume() {
	if s.o.InitRerun {
		s.phase = Initialized
		s.log.Info("init container re-run: the kubelet has run the init container; waiting for a pod restart")
		s.changed()
		return
	}
	r := s.o.Resume
	if r == nil || r.LastExit.IsZero() {
		s.start()
		return
	}
	cfg := s.config()
	s.backoffN = r.BackoffRestarts
	if r.LastExit.Sub(r.LastStart) >= cfg.Backoff.ResetAfterDuration() {
		s.backoffN = 0
	}
	delay := cfg.Backoff.Delay(s.backoffN)
	s.backoffN++
	left := time.Until(r.LastExit.Add(delay))
	if left <= 0 {
		s.start()
		return
	}
	s.log.Info("continuing the container's back-off from its last exit", "backoffRestarts", s.backoffN, "delay", delay, "waiting", left.Round(time.Millisecond))
	s.phase = BackingOff
	s.nextStart = time.Now().Add(left)
	s.backoff = time.NewTimer(left)
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
	s.last = exit
	s.lastStart = now
	v := s.judge(exit, 0)
	// Never restart from inside start(): with a zero backoff a command
	// that keeps failing would recurse. The timer goes through the loop,
	// where signals are still served.
	if v.handling == rules.RestartInPlace && v.delay <= 0 {
		v.delay = time.Nanosecond
	}
	s.act(v, exit, []any{"pid", 0, "exitCode", exit.Code, "ranFor", time.Duration(0)})
}

func (s *supervisor) finish(status int) {
	// A stop must leave nothing either: under a shared PID namespace
	// whatever survives us would live on under the pod's infrastructure
	// container.
	s.disarmProbes()
	s.clearRun(0)
	s.leaveRound()
	s.leaveEnded()
	s.phase = Exited
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
	s.deliver(sig)
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
	first := s.phase != Stopping
	s.phase = Stopping
	s.disarmProbes()
	if s.backoff != nil {
		s.backoff.Stop()
		s.backoff = nil
	}
	s.leaveRound()
	switch {
	case s.proc != nil:
		if first {
			s.log.Info("stop requested; forwarding to the workload", "signal", unix.SignalName(sig), "pid", s.proc.pid, "gracePeriod", s.o.GracePeriod)
		}
		s.deliver(sig)
		if s.grace == nil && s.o.GracePeriod > 0 {
			s.armGrace(s.proc.pid, s.o.GracePeriod)
		}
		s.changed()
	default:
		s.log.Info("stop requested while no workload runs", "signal", unix.SignalName(sig))
		s.finish(s.lastStatus())
	}
}

func (s *supervisor) armGrace(pgid int, d time.Duration) {
	if s.grace != nil {
		s.grace.Stop()
	}
	s.gracePgid, s.graceFor = pgid, d
	s.grace = time.NewTimer(d)
}

func (s *supervisor) disarmGrace() {
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
}

func (s *supervisor) onGraceExpired() {
	s.grace = nil
	s.log.Warn("grace period expired; killing the workload's process group", "pgid", s.gracePgid, "gracePeriod", s.graceFor)
	s.forward(s.gracePgid, unix.SIGKILL)
}

func (s *supervisor) onOrphan(reaped) { s.reapedOrph++ }

// clearRun kills everything left of the run led by pgid (0: of any run),
// so that the next run, or the container's end, finds nothing of it.
func (s *supervisor) clearRun(pgid int) {
	if !killRemnants(pgid, s.onOrphan) {
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
		if !s.reapProbe(r.pid, r.status) {
			s.reapedOrph++
		}
	}
}

// onWorkloadExit handles the workload's exit: it classifies the exit (a
// stop, a pod restart's kill, or an exit for the rules to judge) and then
// acts on that class alone.
func (s *supervisor) onWorkloadExit(st ExitStatus) {
	p := s.proc
	s.proc = nil
	s.disarmProbes()
	kill := s.probeKill
	s.probeKill = nil
	exit := &Exit{ExitStatus: st, Rule: -1, At: time.Now()}
	s.last = exit
	ran := exit.At.Sub(p.started)
	attrs := exitAttrs(p.pid, st, ran)

	if s.phase == Stopping {
		s.endStoppedRun(st, attrs)
		return
	}
	s.disarmGrace()
	// Nothing a finished run started may outlive it: it could hold ports,
	// files or the terminal the next run needs.
	s.clearRun(p.pid)

	if gen := s.pending; gen != nil {
		// Killed by a pod restart: the exit is the pod restart's doing,
		// not the workload's, so the rules do not judge it.
		s.pending = nil
		exit.PodRestart = *gen
		s.restarts++
		s.podRestarts++
		s.lastRestart = exit
		s.log.Info("workload stopped for a pod restart", append(attrs, "generation", *gen, "restarts", s.restarts)...)
		s.enterRound(*gen)
		return
	}
	if kill != nil {
		s.afterProbeKill(kill, exit, ran, attrs)
		return
	}
	s.act(s.judge(exit, ran), exit, attrs)
}

// endStoppedRun finishes a stop whose workload has exited. Natively the
// workload is the container's init, and its exit ends the container: the
// kernel kills every other process of the PID namespace at once (runc does
// the same under a shared one). So whatever is left of the run is killed
// now, not waited for: a background job of a shell, for one, ignores
// SIGINT and SIGQUIT and would otherwise hold the stop open until the
// runtime's SIGKILL.
func (s *supervisor) endStoppedRun(st ExitStatus, attrs []any) {
	s.log.Info("workload exited after a stop request", attrs...)
	s.disarmGrace()
	s.finish(st.Code)
}

// verdict is what the rules made of one exit: the kubelet's decision, who
// carries it out, and for an in-place restart the delay before it.
type verdict struct {
	decision rules.Decision
	handling rules.Handling
	delay    time.Duration
	pod      rules.RestartPolicy
	ran      time.Duration
}

// judge decides an exit with the configuration in force and, for an
// in-place restart, advances the backoff exactly as the kubelet's
// CrashLoopBackOff does: reset after a long enough run, then doubling.
func (s *supervisor) judge(exit *Exit, ran time.Duration) verdict {
	cfg := s.config()
	d, h := cfg.Plan(int32(exit.Code))
	exit.Rule, exit.Action = d.Rule, d.Action
	v := verdict{decision: d, handling: h, pod: cfg.Pod()}
	if h == rules.RestartInPlace && d.Action == rules.ActionRestartAllContainers && s.o.Pod != nil {
		// The pod restart's own back-off applies (enterRound), as
		// upstream, where no exited container is left for a container
		// back-off to apply to; the container back-off only if the
		// announcement fails (act).
		v.ran = ran
		return v
	}
	if h == rules.RestartInPlace {
		if ran >= cfg.Backoff.ResetAfterDuration() {
			s.backoffN = 0
		}
		// The announcing container's own restart follows its backoff too,
		// as KEP-5532 says the container backoff applies to pod restarts:
		// a workload that hits the rule on every start then spaces the pod
		// restarts out instead of looping.
		v.delay = cfg.Backoff.Delay(s.backoffN)
		s.backoffN++
	}
	return v
}

// act carries out a verdict.
func (s *supervisor) act(v verdict, exit *Exit, attrs []any) {
	d := v.decision
	attrs = append(attrs, "rule", d.Rule, "action", string(d.Action), "decidedBy", string(d.Source), "handling", v.handling.String())
	if s.o.InitRerun && v.handling != rules.RestartInPlace {
		s.endRerun(v, exit, attrs)
		return
	}
	switch v.handling {
	case rules.HandOver:
		if s.o.Pod != nil {
			if ended, cancel := s.o.Pod.OthersEnded(); ended != nil {
				s.phase, s.ended, s.endedCancel = Ended, ended, cancel
				s.log.Info("workload exited; the container stays until the pod's other containers have ended, since a pod restart restarts it too",
					append(attrs, "restarts", s.restarts)...)
				s.changed()
				return
			}
		}
		s.log.Info("workload exited; passing its status on to the kubelet or container runtime", append(attrs, "restarts", s.restarts)...)
		s.finish(exit.Code)
		return
	case rules.Hold:
		s.phase = Holding
		s.log.Warn("workload exited and must not restart, but the pod's restartPolicy would make the kubelet restart the container; holding the container idle until it is stopped",
			append(attrs, "restarts", s.restarts, "podRestartPolicy", string(v.pod))...)
		s.changed()
		return
	}
	s.restarts++
	s.lastRestart = exit
	attrs = append(attrs, "restarts", s.restarts)
	switch {
	case d.Action == rules.ActionRestartAllContainers && s.o.Pod != nil:
		s.podRestarts++
		gen, err := s.o.Pod.Announce(int32(exit.Code))
		if err == nil {
			s.log.Info("workload exited; restarting the pod's containers in place", append(attrs, "generation", gen)...)
			s.enterRound(gen)
			return
		}
		s.log.Warn("cannot announce the pod restart; restarting this container only", "err", err)
		cfg := s.config()
		if v.ran >= cfg.Backoff.ResetAfterDuration() {
			s.backoffN = 0
		}
		v.delay = cfg.Backoff.Delay(s.backoffN)
		s.backoffN++
		s.log.Info("workload exited; restarting in place", append(attrs, "delay", v.delay)...)
	case d.Action == rules.ActionRestartAllContainers:
		s.log.Info("workload exited; restarting in place", append(attrs, "delay", v.delay)...)
		s.log.Warn("RestartAllContainers: restarting this container only; the other containers of the pod were not restarted (no pod state directory)")
	default:
		s.log.Info("workload exited; restarting in place", append(attrs, "delay", v.delay)...)
	}
	if v.delay <= 0 {
		s.start()
		return
	}
	s.phase = BackingOff
	s.nextStart = time.Now().Add(v.delay)
	s.backoff = time.NewTimer(v.delay)
	s.changed()
}

func exitAttrs(pid int, st ExitStatus, ran time.Duration) []any {
	a := []any{"pid", pid, "exitCode", st.Code}
	if st.Signal != 0 {
		a = append(a, "signal", unix.SignalName(st.Signal))
	}
	return append(a, "ranFor", ran.Round(time.Millisecond))
}

// PodRestartGrace is how long a workload stopped by a pod restart may take
// to exit before its process group is SIGKILLed. The kubelet stops every
// container of the pod with a grace period override of 0
// (kuberuntime_manager.go, SyncPod, "Killing containers without grace
// period"), which killContainer then raises to minimumGracePeriodInSeconds,
// 2 s (kuberuntime_container.go:905 in v1.36.3, :886 in v1.35.4): the
// runtime sends the container's stop signal and SIGKILL only 2 s later.
// Both releases do the same.
const PodRestartGrace = 2 * time.Second

// onPodRestart handles a pod restart announced by any container. Like the
// kubelet, it stops the workload with the container's stop signal and
// SIGKILLs its process group PodRestartGrace later; its exit is not judged
// by the rules, and the workload then joins the round (enterRound). A
// workload in backoff or held joins at once; one already stopping or
// waiting for an older round answers the newer generation with the same
// restart.
func (s *supervisor) onPodRestart(gen uint64) {
	if s.phase == Stopping || s.phase == Exited || !s.o.Pod.Accept(gen) {
		return
	}
	s.leaveEnded()
	switch {
	case s.proc != nil && s.pending != nil:
		s.pending = &gen
	case s.proc != nil:
		s.pending = &gen
		sig := s.o.PodRestartSignal
		if sig == 0 {
			sig = unix.SIGTERM
		}
		s.log.Info("pod restart; stopping the workload", "generation", gen, "pid", s.proc.pid, "signal", unix.SignalName(sig), "gracePeriod", PodRestartGrace)
		s.deliver(sig)
		s.armGrace(s.proc.pid, PodRestartGrace)
	case s.round != nil:
		s.log.Debug("pod restart while waiting for the previous one; one start answers both", "generation", gen, "previous", s.round.gen)
		s.enterRound(gen)
	default:
		if s.backoff != nil {
			s.backoff.Stop()
			s.backoff = nil
		}
		s.restarts++
		s.podRestarts++
		s.log.Info("pod restart; the workload is not running", "generation", gen, "restarts", s.restarts)
		s.enterRound(gen)
	}
}

// podRound is a pod restart the stopped workload waits to start in.
type podRound struct {
	gen       uint64
	notBefore time.Time
	ready     <-chan struct{}
	cancel    func()
}

func (s *supervisor) roundReady() <-chan struct{} {
	if s.round == nil {
		return nil
	}
	return s.round.ready
}

// enterRound waits, with the workload stopped, to start it in generation
// gen. The first generation of a round takes one step of the pod
// restart's back-off (as the kubelet's, 0 s, then backoff.initial doubling
// to backoff.max, reset after a run of backoff.resetAfter); a newer one
// arriving meanwhile joins the same round without a new step, so however
// many generations are created, each member starts at most once per step.
func (s *supervisor) enterRound(gen uint64) {
	now := time.Now()
	if s.round == nil {
		cfg := s.config()
		if !s.lastStart.IsZero() && now.Sub(s.lastStart) >= cfg.Backoff.ResetAfterDuration() {
			s.podBackoffN = 0
		}
		delay := cfg.Backoff.Delay(s.podBackoffN)
		s.podBackoffN++
		s.round = &podRound{notBefore: now.Add(delay)}
		if delay > 0 {
			s.log.Info("pod restart back-off", "generation", gen, "delay", delay)
		}
	} else if s.round.cancel != nil {
		s.round.cancel()
	}
	s.round.gen = gen
	s.round.ready, s.round.cancel = s.o.Pod.Stopped(gen, s.round.notBefore)
	s.phase = BackingOff
	s.nextStart = s.round.notBefore
	s.changed()
}

// startRound starts the workload in the round it waited for.
func (s *supervisor) startRound() {
	gen := s.round.gen
	s.round = nil
	if code, failed := s.o.Pod.InitFailed(gen); failed {
		// Upstream a failed init container fails a Never pod: the
		// containers after it never run, and the pod's phase follows
		// from their ends.
		s.log.Warn("an init container's re-run failed for good in this pod restart; ending the container instead of starting it",
			"generation", gen, "exitCode", code)
		s.finish(code)
		return
	}
	s.start()
	if s.proc == nil {
		return
	}
	if s.o.InitRerun {
		s.rerunGen = &gen
		return
	}
	if s.started {
		s.o.Pod.Started(gen)
		return
	}
	// As the kubelet starts the containers after a sidecar once its
	// startup probe has succeeded, the round hears of this start then
	// (onProbeResult).
	s.roundStarted = &gen
}

// endRerun ends an init container's re-run whose exit is not restarted
// in place: exit 0 initialized the container (PlanInit), and the round
// hears of its start now; any other end fails the pod restart for the
// members after it, as a failed init container fails the pod upstream.
// Either way the container idles until the next pod restart or its stop.
func (s *supervisor) endRerun(v verdict, exit *Exit, attrs []any) {
	d := v.decision
	attrs = append(attrs, "rule", d.Rule, "action", string(d.Action), "decidedBy", string(d.Source), "restarts", s.restarts)
	gen := s.rerunGen
	s.rerunGen = nil
	if d.Source == rules.SourceInitialized {
		s.phase = Initialized
		s.log.Info("init container re-run succeeded; waiting for the next pod restart", attrs...)
		if gen != nil {
			s.o.Pod.Started(*gen)
		}
		s.changed()
		return
	}
	s.phase = Holding
	s.log.Warn("init container re-run failed and is not restarted; the containers after it will not start", attrs...)
	if gen != nil {
		s.o.Pod.Failed(*gen)
	}
	s.changed()
}

// leaveEnded stops waiting for the pod's other containers to end.
func (s *supervisor) leaveEnded() {
	if s.endedCancel != nil {
		s.endedCancel()
	}
	s.ended, s.endedCancel = nil, nil
}

// leaveRound stops waiting for a round, on a stop or the end.
func (s *supervisor) leaveRound() {
	if s.round != nil {
		s.round.cancel()
		s.round = nil
	}
}
