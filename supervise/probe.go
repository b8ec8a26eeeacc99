package supervise

import (
	"encoding/json"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The supervisor runs a wrapped container's liveness and startup probes
// itself (rules.Config.Probes), as the kubelet's prober does for a
// container of its own (pkg/kubelet/prober/worker.go, v1.37.2): each
// probe ticks every PeriodSeconds from one fixed phase, the first check
// of a run comes at the first tick once InitialDelaySeconds have passed
// and the kubelet could have seen the run (firstCheckIn), liveness runs
// only once the startup probe has succeeded, and FailureThreshold
// failures in a row kill the workload.
// The probes are armed at every start and disarmed at every exit, so a
// workload in back-off or held, which natively is no running container,
// is never probed.
//
// Each check is a child process of the supervisor, reaped by the loop
// like every other child: an exec check runs the probe's command (looked
// up in PATH, in the workload's environment, in its own process group,
// killed at TimeoutSeconds), and an httpGet, tcpSocket or grpc check runs
// the restart-probe binary (Options.ProbeCommand), which holds the
// network code the supervisor itself must not link.

// DefaultProbeGrace is the grace period of a probe kill when neither the
// probe nor the pod sets one: the pod's default
// terminationGracePeriodSeconds.
const DefaultProbeGrace = 30 * time.Second

// networkCheckMargin is how much longer than its timeout a restart-probe
// check may take before the supervisor kills it: restart-probe's own
// start-up, beyond the check it times itself.
const networkCheckMargin = time.Second

// runProbes are the probes and the watchdog of the current run: armed at
// every start, disarmed at every exit.
type runProbes struct {
	startup, liveness *prober
	// started is false while a startup probe has not yet succeeded.
	started bool
	// kills counts the workload's stops by a probe, for the log.
	kills int
	// epoch is the phase of every probe's ticks: the first start of the
	// workload, as the kubelet's worker ticks from the pod's addition.
	epoch time.Time
	// dog is the run's watchdog (watchdog.go); beats carries the output
	// taps' heartbeats to the loop, pattern what they match, and taps
	// the output itself (output.go), for the supervisor's whole life.
	dog     *watchdog
	beats   chan struct{}
	pattern patternHolder
	taps    outputTaps
	// unwatched: the log said that the watchdog sees no heartbeat.
	unwatched bool
}

type prober struct {
	name string // "liveness" or "startup"
	spec *rules.Probe
	next *time.Timer // the next check
	// run is the check in flight, nil when none is.
	run       *probeRun
	failures  int // consecutive
	successes int // consecutive
	total     int // failures since the workload started
}

type probeRun struct {
	pid      int
	timeout  *time.Timer
	timedOut bool
}

// probeKill records that the workload is being stopped because a probe
// reached its failure threshold.
type probeKill struct {
	probe   string
	restart bool
}

func (p *prober) nextC() <-chan time.Time {
	if p == nil {
		return nil
	}
	return timerC(p.next)
}

func (p *prober) timeoutC() <-chan time.Time {
	if p == nil || p.run == nil {
		return nil
	}
	return timerC(p.run.timeout)
}

// armProbes schedules the probes of the configuration in force for the
// run that has just started.
func (s *supervisor) armProbes() {
	s.disarmProbes()
	ps := s.config().Probes
	s.probes.started = ps == nil || ps.Startup == nil
	if ps == nil {
		return
	}
	if s.probes.epoch.IsZero() {
		s.probes.epoch = s.hist.lastStart
	}
	if ps.Startup != nil {
		s.probes.startup = &prober{name: "startup", spec: ps.Startup, next: time.NewTimer(s.firstCheckIn(ps.Startup))}
	}
	if ps.Liveness != nil {
		s.probes.liveness = &prober{name: "liveness", spec: ps.Liveness, next: time.NewTimer(s.firstCheckIn(ps.Liveness))}
	}
}

// probeSeenAfter is the shortest time between a start and the kubelet's
// first check of it. The prober's worker reads the container from the
// kubelet's status cache (worker.go:221-242, v1.37.2), which shows a new
// container only at the pod sync that follows the PLEG's relist, every
// second (genericPlegRelistPeriod, kubelet.go:215); until then there is
// nothing to probe. Without this bound a probe with initialDelaySeconds 0
// and failureThreshold 1 would kill a workload milliseconds after its
// start.
const probeSeenAfter = time.Second

// firstCheckIn returns how long after now the first check of probe p comes
// in the run that started at s.hist.lastStart. The kubelet's worker starts its
// ticker when the pod is added, before any container starts, and never
// resets it (worker.go:160-200): its checks keep that phase across every
// restart of the container, and the first one after a start is the first
// tick at which the container has run InitialDelaySeconds (worker.go:331)
// and is in the status cache. Here the phase is the supervisor's first
// start (probes.epoch), the ticks those of p's period.
func (s *supervisor) firstCheckIn(p *rules.Probe) time.Duration {
	due := s.hist.lastStart.Add(max(p.InitialDelay(), probeSeenAfter))
	period := p.Period()
	ticks := (due.Sub(s.probes.epoch) + period - 1) / period
	return time.Until(s.probes.epoch.Add(ticks * period))
}

// disarmProbes stops every probe and the watchdog, and kills a check in
// flight; the loop reaps it as an orphan.
func (s *supervisor) disarmProbes() {
	for _, p := range []*prober{s.probes.startup, s.probes.liveness} {
		if p == nil {
			continue
		}
		if p.next != nil {
			p.next.Stop()
		}
		if p.run != nil {
			p.run.timeout.Stop()
			unix.Kill(-p.run.pid, unix.SIGKILL)
		}
	}
	s.probes.startup, s.probes.liveness = nil, nil
	s.disarmWatchdog()
	// A run that ends or stops before its startup probe succeeded never
	// reports its start; the others wait for it until their bound.
	s.member.startedIn = nil
}

// onProbeTick runs one check of p, unless one is still in flight (the
// kubelet's worker runs its checks one after the other and skips the
// ticks a slow one overran) or p is liveness and the startup probe has
// not succeeded yet.
func (s *supervisor) onProbeTick(p *prober) {
	p.next.Reset(p.spec.Period())
	if p.run != nil || s.proc == nil || s.ending.cause == endProbeKill {
		return
	}
	if p.name == "liveness" && !s.probes.started {
		return
	}
	path, argv, quiet := s.probeArgv(p)
	if path == "" {
		s.onProbeResult(p, false, "no restart-probe binary next to the supervisor for a "+p.spec.Handler()+" check")
		return
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		s.onProbeResult(p, false, "cannot open "+os.DevNull+": "+err.Error())
		return
	}
	out := null.Fd()
	if !quiet {
		out = 2
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   s.o.Env,
		Files: []uintptr{null.Fd(), null.Fd(), out},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	null.Close()
	if err != nil {
		s.onProbeResult(p, false, "cannot run "+argv[0]+": "+describeStartErr(err))
		return
	}
	// An exec check is bounded by its timeout here, as the kubelet's exec
	// probe. restart-probe bounds a network check by the timeout itself,
	// as the kubelet's HTTP client does, and tells a failure from an
	// errored check (its exit status); the supervisor's timer is then only
	// the backstop for a restart-probe that hangs, a second later, as the
	// readiness exec probe of `restart-probe ready` gets one more second.
	limit := p.spec.Timeout()
	if p.spec.Exec == nil {
		limit += networkCheckMargin
	}
	p.run = &probeRun{pid: pid, timeout: time.NewTimer(limit)}
}

// probeArgv returns the check's command and whether its standard error
// goes to /dev/null (an exec check's does, as the kubelet keeps it out of
// the container's log; restart-probe writes one line there on a failure).
func (s *supervisor) probeArgv(p *prober) (path string, argv []string, quiet bool) {
	if e := p.spec.Exec; e != nil {
		path, err := exec.LookPath(e.Command[0])
		if err != nil {
			path = e.Command[0] // ForkExec reports the failure
		}
		return path, e.Command, true
	}
	if s.o.ProbeCommand == "" {
		return "", nil, false
	}
	handler := *p.spec
	handler.InitialDelaySeconds, handler.PeriodSeconds, handler.SuccessThreshold, handler.FailureThreshold = 0, 0, 0, 0
	handler.TerminationGracePeriodSeconds = nil
	b, _ := json.Marshal(handler)
	return s.o.ProbeCommand, []string{s.o.ProbeCommand, "check", "--name", p.name, string(b)}, false
}

func (s *supervisor) onProbeTimeout(p *prober) {
	p.run.timedOut = true
	unix.Kill(-p.run.pid, unix.SIGKILL)
}

// reapProbe takes the status of a check in flight; it reports whether pid
// was one.
func (s *supervisor) reapProbe(pid int, ws unix.WaitStatus) bool {
	for _, p := range []*prober{s.probes.startup, s.probes.liveness} {
		if p == nil || p.run == nil || p.run.pid != pid {
			continue
		}
		r := p.run
		p.run = nil
		r.timeout.Stop()
		// The check's own children, if any, go with it.
		unix.Kill(-pid, unix.SIGKILL)
		st := exitStatusOf(ws)
		switch {
		case r.timedOut:
			s.onProbeResult(p, false, "timed out after "+p.spec.Timeout().String())
		case st.Signal != 0:
			s.onProbeResult(p, false, "killed by "+unix.SignalName(st.Signal))
		case st.Code == contract.ProbeExitErrored && p.spec.Exec == nil:
			// restart-probe's errored check: the kubelet's worker
			// throws such a result away (pkg/kubelet/prober/worker.go
			// doProbe, v1.37.2), so it is neither a failure nor a
			// success; the next check comes at the next period.
			s.log.Info(p.name+" probe errored; result discarded", "handler", p.spec.Handler())
		case st.Code != 0:
			s.onProbeResult(p, false, "exit code "+itoa(st.Code))
		default:
			s.onProbeResult(p, true, "")
		}
		return true
	}
	return false
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func (s *supervisor) onProbeResult(p *prober, ok bool, why string) {
	if s.proc == nil || s.ending.cause == endProbeKill {
		return
	}
	if ok {
		p.failures = 0
		p.successes++
		if p.name == "startup" && p.successes >= p.spec.Successes() {
			s.probes.started = true
			p.next.Stop()
			s.log.Info("startup probe succeeded", "pid", s.proc.pid, "after", time.Since(s.hist.lastStart).Round(time.Millisecond))
			s.changed()
			if gen := s.member.startedIn; gen != nil {
				s.member.startedIn = nil
				s.o.Pod.Started(*gen)
			}
		}
		return
	}
	p.successes = 0
	p.failures++
	p.total++
	threshold := p.spec.Failures()
	s.log.Warn(p.name+" probe failed", "handler", p.spec.Handler(), "reason", why, "consecutive", p.failures, "failureThreshold", threshold, "failuresThisRun", p.total)
	if p.failures < threshold {
		return
	}
	s.onProbeFailure(p)
}

// onProbeFailure stops the workload whose liveness or startup probe
// reached its failure threshold, as the kubelet kills the container: the
// container's stop signal, then SIGKILL after the probe's
// terminationGracePeriodSeconds, else the pod's. Its exit is then handled
// by onWorkloadExit with upstream's probe rule.
func (s *supervisor) onProbeFailure(p *prober) {
	cfg := s.config()
	restart := cfg.RestartAfterProbeFailure()
	grace := DefaultProbeGrace
	if g := p.spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	sig := s.o.PodRestartSignal
	then := "judging the exit by the rules (the container's restartPolicy is Never)"
	if restart {
		then = "restarting it in place (container restartPolicy not Never)"
	}
	s.log.Warn(p.name+" probe failed "+itoa(p.failures)+" times in a row; stopping the workload, then "+then,
		"pid", s.proc.pid, "signal", unix.SignalName(sig), "gracePeriod", grace, "probeKills", s.probes.kills+1)
	s.probes.kills++
	if s.ending.cause == endNone {
		// A pod restart's kill already under way keeps its cause: its
		// exit joins the pod restart's round.
		s.ending = ending{cause: endProbeKill, probe: probeKill{probe: p.name, restart: restart}}
	}
	s.disarmProbes()
	s.stopRun(sig, grace, true)
}

// afterProbeKill handles the exit of a workload a probe failure stopped:
// restarted in place with the container's back-off when upstream would
// restart the container, otherwise judged by the rules like any exit.
func (s *supervisor) afterProbeKill(k probeKill, exit *Exit, previous time.Time, ran time.Duration, attrs []any) {
	if !k.restart {
		s.act(s.judge(exit, ran), exit, append(attrs, "probe", k.probe))
		return
	}
	cfg := s.config()
	v := verdict{decision: rules.Decision{Restart: true, Rule: -1, Action: rules.ActionRestart, Source: rules.SourceContainerPolicy},
		handling: rules.RestartInPlace, pod: cfg.Pod(), backoff: cfg.Backoff, ran: ran,
		killedByProbe: true, previous: previous}
	exit.Action = rules.ActionRestart
	s.act(v, exit, append(attrs, "probe", k.probe))
}
