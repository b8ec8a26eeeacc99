package supervise

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// What happens when the workload exits: the exit is recorded, judged by
// the rules (or ends a stop), checked against the limits, and carried out
// as a restart in place, a pod restart, a hold or a hand-over to the
// kubelet.

// onWorkloadExit handles the workload's exit: it reads why the run was
// ending (s.ending: a stop, a pod restart's kill, a probe's kill, or
// nothing, and then the exit is the rules' to judge) and acts on that
// alone.
func (s *supervisor) onWorkloadExit(st ExitStatus) {
	p := s.proc
	s.proc = nil
	s.disarmProbes()
	end := s.ending
	s.ending = ending{}
	exit := &Exit{ExitStatus: st, Rule: -1, At: time.Now()}
	previous := s.previousExit()
	s.hist.last = exit
	ran := exit.At.Sub(p.started)
	attrs := exitAttrs(p.pid, st, ran)
	if end.cause == endNone {
		// A kill of the supervisor's own (a stop's, a probe's, a pod
		// restart's grace) is no out-of-memory kill.
		if exit.Reason = s.oomReason(); exit.Reason != "" {
			attrs = append(attrs, "exitReason", exit.Reason)
		}
	}

	if end.cause == endStop {
		exit.Stopped = true
		s.endStoppedRun(st, attrs)
		return
	}
	s.grace.disarm()
	// Nothing a finished run started may outlive it: it could hold ports,
	// files or the terminal the next run needs.
	s.clearRun(p.pid)

	switch end.cause {
	case endPodRestart:
		// Killed by a pod restart: the exit is the pod restart's doing,
		// not the workload's, so the rules do not judge it.
		exit.PodRestart = end.gen
		s.recordRestart(exit, true, false)
		s.log.Info("workload stopped for a pod restart", append(attrs, "generation", end.gen, "restarts", s.hist.restarts)...)
		s.enterRound(end.gen)
	case endProbeKill:
		s.afterProbeKill(end.probe, exit, previous, ran, attrs)
	case endStall:
		stalledExit(exit, s.config().Watchdog)
		s.act(s.judge(exit, ran), exit, append(attrs, "exitReason", exit.Reason, "judgedAs", exit.Code))
	default:
		s.act(s.judge(exit, ran), exit, attrs)
	}
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
	s.grace.disarm()
	s.finish(st.Code)
}

// judge decides an exit with the configuration in force.
func (s *supervisor) judge(exit *Exit, ran time.Duration) verdict {
	cfg := s.config()
	d, h := cfg.PlanExit(int32(exit.Code), exit.Reason == ReasonOOMKilled)
	exit.Rule, exit.Action = d.Rule, d.Action
	return verdict{decision: d, handling: h, pod: cfg.Pod(), backoff: cfg.Backoff, ran: ran}
}

// act carries out a verdict. A restart in place is first put to the
// limits (limits.go) and the pre-restart check (precheck.go), either of
// which can make it a hand-over.
func (s *supervisor) act(v verdict, exit *Exit, attrs []any) {
	d := v.decision
	attrs = append(attrs, "rule", d.Rule, "action", string(d.Action), "decidedBy", string(d.Source))
	cfg := s.config()
	if v.handling == rules.Hold && cfg.HandsOver(int32(exit.Code)) {
		// Whatever the rules say: the user asked that the kubelet, and
		// the pod's policy, have this exit.
		s.handOverInstead(v, &HandOver{ReasonHandOverExitCode, "exit code " + itoa(exit.Code) + " is in handOverExitCodes"}, exit, attrs)
		return
	}
	if v.handling == rules.RestartInPlace && cfg.InitContainer && !s.o.InitRerun && s.containerOOMKilled() {
		// The runtime will report this container OOMKilled whatever a
		// later run does, and the kubelet takes such an init container
		// for failed, even after a run that exits 0 (oom.go): a new
		// container, the kubelet's, is the only way to initialize it.
		s.handOverInstead(v, &HandOver{ReasonInitContainerOOMKilled,
			"the container runtime reports this init container OOMKilled for the rest of its life, which the kubelet counts as failed"}, exit, attrs)
		return
	}
	if v.handling == rules.RestartInPlace && v.decision.Source == rules.SourceRule && cfg.Escalation != nil {
		k, h := s.escalate(cfg.Escalation, &v, exit)
		if h != nil {
			s.handOverInstead(v, h, exit, attrs)
			return
		}
		attrs = append(attrs, "escalationStep", k+1, "escalatedTo", string(v.decision.Action))
	}
	if v.handling == rules.RestartInPlace {
		if h := s.limit(cfg, exit); h != nil {
			s.handOverInstead(v, h, exit, attrs)
			return
		}
		if cfg.PreRestartCheck != nil {
			s.startPreRestartCheck(cfg.PreRestartCheck, v, exit, attrs)
			return
		}
	}
	s.carryOut(v, exit, attrs)
}

// handOverInstead hands over an exit the rules would restart in place,
// for the reason h, with one line that says why.
func (s *supervisor) handOverInstead(v verdict, h *HandOver, exit *Exit, attrs []any) {
	s.handOver = h
	s.log.Warn("workload exited; not restarting in place: "+h.Message+"; passing its status on to the kubelet, whose pod restartPolicy decides",
		append(attrs[:len(attrs):len(attrs)], "reason", h.Reason, "restarts", s.hist.restarts)...)
	v.handling = rules.HandOver
	s.carryOut(v, exit, attrs)
}

// carryOut carries out a verdict as the rules (and the limits) made it.
func (s *supervisor) carryOut(v verdict, exit *Exit, attrs []any) {
	attrs = append(attrs, "handling", v.handling.String())
	if s.o.InitRerun && v.handling != rules.RestartInPlace {
		s.endRerun(v, exit, attrs)
		return
	}
	switch v.handling {
	case rules.HandOver:
		// A final exit of a pod member waits for the others, since a pod
		// restart would restart it too. An exit that the pod's policy
		// restarts is not final: the kubelet restarts such a container
		// at once, with its own back-off and restartCount, whatever the
		// other containers do (ShouldContainerBeRestarted,
		// pkg/kubelet/container/helpers.go:90-126, v1.37.2), so the
		// container ends now.
		if s.o.Pod != nil && !rules.PolicyRestarts(v.pod, int32(exit.Code)) {
			if ended, cancel := s.o.Pod.OthersEnded(v.pod); ended != nil {
				s.log.Info("workload exited; the container stays until the pod's other containers have ended, since a pod restart restarts it too",
					append(attrs, "restarts", s.hist.restarts)...)
				s.await(waiting{kind: waitOthers, ended: ended, cancel: cancel})
				return
			}
		}
		s.log.Info("workload exited; passing its status on to the kubelet or container runtime", append(attrs, "restarts", s.hist.restarts)...)
		s.finish(exit.Code)
		return
	case rules.Hold:
		s.log.Warn("workload exited and must not restart, but the pod's restartPolicy would make the kubelet restart the container; holding the container idle until it is stopped",
			append(attrs, "restarts", s.hist.restarts, "podRestartPolicy", string(v.pod))...)
		s.await(waiting{kind: waitHold})
		return
	}
	s.restart(v, exit, attrs)
}

// verdict is what the rules made of one exit: the kubelet's decision, who
// carries it out, and what an in-place restart's delay follows from.
type verdict struct {
	decision rules.Decision
	handling rules.Handling
	pod      rules.RestartPolicy
	// backoff is the container's curve in the configuration that judged
	// the exit, ran how long the run lasted (its reset).
	backoff rules.Backoff
	ran     time.Duration
	// minDelay is the shortest wait before a restart in place.
	minDelay time.Duration
	// killedByProbe: the run was killed by its liveness or startup probe
	// and previous is when the run before it exited (zero when there was
	// none): the kubelet kills such a container and tries to start it in
	// the same sync, where doBackOff asks about the instance that exited
	// before (kuberuntime_manager.go:2080-2107, v1.37.2); with none there
	// is no back-off and no step at all (restart).
	killedByProbe bool
	previous      time.Time
}

func exitAttrs(pid int, st ExitStatus, ran time.Duration) []any {
	a := []any{"pid", pid, "exitCode", st.Code}
	if st.Signal != 0 {
		a = append(a, "signal", unix.SignalName(st.Signal))
	}
	return append(a, "ranFor", ran.Round(time.Millisecond))
}
