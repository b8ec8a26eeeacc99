package supervise

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The pod restart round (KEP-5532 RestartAllContainers): how an exit
// announces a pod restart, how a pod restart stops the workload, and how
// the stopped workload waits for and starts in its round.

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
//
// It is the sum of the small interfaces each step of the loop uses, as
// Tekton's entrypoint takes a Waiter, a Runner and a PostWriter; one
// value implements all of them (podstate's Pod.Restarter), since they
// share one pod's state and make sense only together.
type PodRestarter interface {
	Announcer
	RestartFeed
	RoundGate
	RoundReporter
	EndWaiter
}

// Announcer is what an exit under a RestartAllContainers rule uses (act).
type Announcer interface {
	// Announce asks every container of the pod to restart because this
	// workload exited with exitCode under a RestartAllContainers rule, and
	// returns the generation the workload's next run belongs to (the one
	// it created, or the one already under way). On an error the workload
	// is restarted alone, with the container's back-off.
	Announce(exitCode int32) (gen uint64, err error)
}

// RestartFeed is how pod restarts reach the loop (Run, onPodRestart).
type RestartFeed interface {
	// Pending delivers pod restarts (generation numbers) announced by any
	// container of the pod, including this one.
	Pending() <-chan uint64
	// Accept reports whether generation gen asks this workload to restart.
	Accept(gen uint64) bool
}

// RoundGate says when, and whether, a stopped workload starts in a round
// (enterRound, startRound).
type RoundGate interface {
	// Stopped records that this workload is stopped for generation gen and
	// returns a channel that is closed when it may start again: once the
	// other members have stopped and, for a regular container, the
	// sidecars run again (each wait bounded). There is no back-off between
	// pod restarts, as upstream (enterRound). cancel stops waiting, for a
	// newer generation or a stop; the channel is then never closed.
	Stopped(gen uint64) (ready <-chan struct{}, cancel func())
	// InitFailed reports whether the re-run of an init container before
	// this one failed for good in generation gen, and its exit code:
	// upstream the pod then fails, so this member ends instead of
	// starting.
	InitFailed(gen uint64) (exitCode int, failed bool)
}

// RoundReporter tells the round how this member's run in it went
// (startRound, onProbeResult, endRerun), which the members after it wait
// for.
type RoundReporter interface {
	// Started records that the run of generation gen has started.
	Started(gen uint64)
	// Failed records that this container's run of generation gen failed
	// for good with exitCode (InitRerun only): the members after it must
	// not start, and end with that code.
	Failed(gen uint64, exitCode int)
}

// EndWaiter keeps a container whose workload has ended until the pod's
// other regular members have ended too (act's hand-over, phase Ended).
type EndWaiter interface {
	// OthersEnded returns, for a regular member of a pod whose other
	// regular members may still run, a channel closed once each of them
	// has ended or waits in Ended too; nil when there is no one to wait
	// for. pod is the pod's restartPolicy: a member whose last exit it
	// restarts has not ended, since the kubelet starts it again. cancel
	// stops the wait (a pod restart or a stop came first).
	OthersEnded(pod rules.RestartPolicy) (ended <-chan struct{}, cancel func())
}

func (s *supervisor) podPending() <-chan uint64 {
	if s.o.Pod == nil {
		return nil
	}
	return s.o.Pod.Pending()
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
	if s.stopping || s.exited || s.terminating || !s.o.Pod.Accept(gen) {
		return
	}
	if s.wait.kind == waitOthers {
		s.wait.leave()
	}
	switch {
	case s.proc != nil && s.ending.cause == endPodRestart:
		s.ending.gen = gen
	case s.proc != nil:
		// A pod restart takes the place of a probe's kill under way.
		s.ending = ending{cause: endPodRestart, gen: gen}
		sig := s.o.PodRestartSignal
		s.log.Info("pod restart; stopping the workload", "generation", gen, "pid", s.proc.pid, "signal", unix.SignalName(sig), "gracePeriod", PodRestartGrace)
		s.stopRun(sig, PodRestartGrace, true)
	case s.wait.kind == waitRound:
		s.log.Debug("pod restart while waiting for the previous one; one start answers both", "generation", gen, "previous", s.wait.round.gen)
		s.enterRound(gen)
	case s.wait.kind == waitGroup:
		// The group restart this workload asked for, or one under way.
		g := s.wait.group
		s.wait.leave()
		s.groupArrived(g)
		s.log.Info("group restart; the workload is not running", "generation", gen, "restarts", s.hist.restarts)
		s.enterRound(gen)
	default:
		s.wait.leave() // the back-off timer, a hold, an idle re-run
		s.recordRestart(nil, true, false)
		s.log.Info("pod restart; the workload is not running", "generation", gen, "restarts", s.hist.restarts)
		s.enterRound(gen)
	}
}

// member is this container's part in the pod's restarts beside the wait
// for a round (waiting.round): the round this run has yet to report its
// start or failure to.
type member struct {
	// startedIn is the pod restart whose start is reported to the round
	// once the startup probe of this run has succeeded (onProbeResult).
	startedIn *uint64
	// rerunOf is the pod restart an init container's re-run
	// (Options.InitRerun) serves; its start is reported once the run
	// initialized the container, its failure once it failed for good
	// (endRerun).
	rerunOf *uint64
}

// podRound is a pod restart the stopped workload waits to start in
// (waitRound).
type podRound struct {
	gen    uint64
	ready  <-chan struct{}
	cancel func()
}

// leave stops waiting for the round, on a stop or the end.
func (r *podRound) leave() {
	if r.cancel != nil {
		r.cancel()
	}
}

// enterRound waits, with the workload stopped, to start it in generation
// gen, together with the pod's other members: once they have all stopped
// (podstate's round), with no back-off. Upstream a pod restart removes
// every container from the runtime (SyncPod's ContainersToReset loop), so
// at the next sync doBackOff finds no exited status to measure a back-off
// from and every container starts at once, in the pod's order
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go, k8s.io/kubernetes
// v1.37.2 and v1.36.0). A back-off kept here, counted by each member from
// its own last start, put members seconds apart in the same round. A
// newer generation arriving while the workload waits joins the same
// round: one start answers both.
func (s *supervisor) enterRound(gen uint64) {
	r := s.wait.round
	if s.wait.kind != waitRound {
		r = &podRound{}
	} else {
		r.leave()
	}
	r.gen = gen
	r.ready, r.cancel = s.o.Pod.Stopped(gen)
	s.await(waiting{kind: waitRound, round: r})
}

// startRound starts the workload in the round it waited for.
func (s *supervisor) startRound() {
	gen := s.wait.round.gen
	s.wait = waiting{}
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
		s.member.rerunOf = &gen
		return
	}
	if s.probes.started {
		s.o.Pod.Started(gen)
		return
	}
	// As the kubelet starts the containers after a sidecar once its
	// startup probe has succeeded, the round hears of this start then
	// (onProbeResult).
	s.member.startedIn = &gen
}

// endRerun ends an init container's re-run whose exit is not restarted
// in place: exit 0 initialized the container (PlanInit), and the round
// hears of its start now; any other end fails the pod restart for the
// members after it, as a failed init container fails the pod upstream.
// Either way the container idles until the next pod restart or its stop.
func (s *supervisor) endRerun(v verdict, exit *Exit, attrs []any) {
	d := v.decision
	attrs = append(attrs, "rule", d.Rule, "action", string(d.Action), "decidedBy", string(d.Source), "restarts", s.hist.restarts)
	gen := s.member.rerunOf
	s.member.rerunOf = nil
	if d.Source == rules.SourceInitialized {
		s.log.Info("init container re-run succeeded; waiting for the next pod restart", attrs...)
		if gen != nil {
			s.o.Pod.Started(*gen)
		}
		s.await(waiting{kind: waitRerun})
		return
	}
	s.log.Warn("init container re-run failed and is not restarted; the containers after it will not start", attrs...)
	if gen != nil {
		s.o.Pod.Failed(*gen, failedCode(exit))
	}
	s.await(waiting{kind: waitHold})
}

// failedCode is the exit code a failed re-run hands to the members after
// it: the container's exit code, 1 when the exit says none (as the
// kubelet reports a failure with no code).
func failedCode(exit *Exit) int {
	if exit == nil || exit.Code == 0 {
		return 1
	}
	return exit.Code
}
