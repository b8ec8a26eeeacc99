package supervise

import (
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// Restarting in place: the first start (at once, or after what is left of
// a back-off an earlier supervisor of the container handed over), the
// delay of each restart (the container's curve; for a probe kill, none
// when the run before exited at least the current step ago, else the full
// step, as the kubelet decides it), and the timer the loop serves.

// resume makes the first start: at once, or, when an earlier supervisor of
// this container handed its last exit over to the kubelet, after what is
// left of the delay the container's back-off asks for. That delay is
// measured from the exit, as the kubelet's doBackOff measures it from the
// container's FinishedAt, and the kubelet's own wait, which counted fewer
// exits, has already used part of it.
func (s *supervisor) resume() {
	s.baselineProgress()
	if s.o.InitRerun {
		s.log.Info("init container re-run: the kubelet has run the init container; waiting for a pod restart")
		s.await(waiting{kind: waitRerun})
		return
	}
	r := s.o.Resume
	if r != nil && r.Stopped {
		s.backoff = backoff{n: r.BackoffRestarts, key: r.BackoffKey}
		if k := s.resourcesKey(); k != "" && r.BackoffKey != "" && k != r.BackoffKey {
			// A resize with RestartContainer: the kubelet's start finds
			// no entry under the new key and, when an earlier instance
			// of the container exited (a step was taken before), makes
			// one (doBackOff's Next): a fresh curve, one step in.
			s.backoff = backoff{n: min(r.BackoffRestarts, 1), key: k}
			s.log.Info("the earlier supervisor was stopped, not crashed, and the container's resources changed: starting at once, the back-off starts over")
		} else {
			s.log.Info("the earlier supervisor was stopped, not crashed: starting at once, the back-off goes on from its count", "backoffRestarts", r.BackoffRestarts)
		}
		s.start()
		return
	}
	if r == nil || r.LastExit.IsZero() {
		s.start()
		return
	}
	b, delay := resumed(s.config().Backoff, r, s.resourcesKey())
	s.backoff = b
	left := time.Until(r.LastExit.Add(delay))
	if left <= 0 {
		s.start()
		return
	}
	s.log.Info("continuing the container's back-off from its last exit", "backoffRestarts", s.backoff.n, "delay", delay, "waiting", left.Round(time.Millisecond))
	s.restartAfter(left)
}

// restart carries out a restart in place: of the whole pod through its
// round when a RestartAllContainers rule asks for it and the pod's state is
// shared, otherwise of this container after a step of its back-off.
func (s *supervisor) restart(v verdict, exit *Exit, attrs []any) {
	d := v.decision
	if d.Action == rules.ActionRestartGroup {
		// Counted when the group restart arrives (onPodRestart): a
		// refusal hands the exit over instead.
		s.requestGroup(v, exit, attrs)
		return
	}
	podWide := d.Action == rules.ActionRestartAllContainers
	s.recordRestart(exit, podWide && s.o.Pod != nil, true)
	attrs = append(attrs, "restarts", s.hist.restarts)
	if podWide && s.o.Pod != nil {
		// The pod restart's own back-off applies (enterRound), as
		// upstream, where no exited container is left for a container
		// back-off to apply to; the container back-off only if the
		// announcement fails.
		gen, err := s.o.Pod.Announce(int32(exit.Code))
		if err == nil {
			s.log.Info("workload exited; restarting the pod's containers in place", append(attrs, "generation", gen)...)
			s.enterRound(gen)
			return
		}
		s.log.Warn("cannot announce the pod restart; restarting this container only", "err", err)
		podWide = false
	}
	// The one step of the container's back-off. A container that restarts
	// alone under RestartAllContainers follows it too, as KEP-5532 says the
	// container backoff applies to pod restarts: a workload that hits the
	// rule on every start then spaces its restarts out instead of looping.
	var delay time.Duration
	switch {
	case v.killedByProbe && v.previous.IsZero():
		// No earlier instance: doBackOff finds no exited container and
		// neither waits nor takes a step.
	case v.killedByProbe:
		// The kill's sync asks doBackOff about the instance that exited
		// before (the newest exited one in its status snapshot): when that
		// one exited less than the current step ago the start is refused,
		// and every later sync measures the step from the killed
		// instance's own exit, so the start comes a full step after the
		// kill; otherwise it comes at once. Either way the curve takes one
		// step (kuberuntime_manager.go:2080-2107, v1.37.2). The kubelet's
		// retry of a refused start is jittered up to half the step again
		// (pod_workers.go:1538-1547); the supervisor waits the step.
		if d := s.backoff.next(v.backoff, v.ran, s.resourcesKey()); exit.At.Sub(v.previous) < d {
			delay = d
		}
	default:
		delay = max(s.backoff.next(v.backoff, v.ran, s.resourcesKey()), v.minDelay)
	}
	s.log.Info("workload exited; restarting in place", append(attrs, "delay", delay)...)
	if podWide {
		s.log.Warn("RestartAllContainers: restarting this container only; the other containers of the pod were not restarted (no pod state directory)")
	}
	s.restartAfter(delay)
}

// previousExit is when the run before the current one exited: this
// supervisor's last exit, else the one an earlier supervisor of the
// container handed over; zero when the current run is the container's
// first.
func (s *supervisor) previousExit() time.Time {
	if s.hist.last != nil {
		return s.hist.last.At
	}
	if s.o.Resume != nil {
		return s.o.Resume.LastExit
	}
	return time.Time{}
}

// restartAfter starts the workload at once, or after delay through the
// back-off timer, which the loop serves with everything else.
func (s *supervisor) restartAfter(delay time.Duration) {
	if delay <= 0 {
		s.start()
		return
	}
	s.await(waiting{kind: waitBackoff, until: time.Now().Add(delay), timer: time.NewTimer(delay)})
}
