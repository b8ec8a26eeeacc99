package supervise

import (
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
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
	// Stopped: the exit ended a stop asked of the container (the kubelet's
	// or the runtime's), not one the workload chose; the kubelet's
	// back-off does not count it.
	Stopped bool
	// Reason is the kubelet's reason for the exit when the supervisor
	// can tell it: ReasonOOMKilled (oom.go), else empty.
	Reason string
	At     time.Time
}

// State is a snapshot for status reporting.
type State struct {
	Phase       contract.Phase
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
	// BackoffKey is the container's resources when the curve took its last
	// step (resources.go), "" when unknown.
	BackoffKey string
	// Limits is what the limits remember (the restart budget, the
	// progress count); the next supervisor of the container continues
	// from it (Options.Limits).
	Limits LimitState
	// HandOver is why the last exit was handed over although the rules
	// would have restarted it in place; nil when it was not.
	HandOver *HandOver
	// Terminating: the kubelet is stopping this container instance
	// (Options.TerminatingSignal); the workload's exit ends supervision.
	Terminating bool
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

// endCause is why the running workload is ending. The loop records it
// when it kills or stops the run (as tini's loop knows whether it
// forwarded a stop), and onWorkloadExit reads it, and nothing else, to
// decide what the exit means.
type endCause int

const (
	// endNone: nothing the supervisor did ends the run; its exit is the
	// workload's own, for the rules to judge.
	endNone endCause = iota
	// endProbeKill: a liveness or startup probe reached its failure
	// threshold and the supervisor stops the workload (ending.probe).
	endProbeKill
	// endStall: the watchdog saw no heartbeat in time and stops the
	// workload; its exit is judged as the watchdog's exit code, reason
	// Stalled (watchdog.go).
	endStall
	// endPodRestart: a pod restart stops the workload (generation
	// ending.gen); its exit is not judged but joins the pod restart's
	// round. It takes the place of a probe kill under way.
	endPodRestart
	// endStop: a stop was requested (phase Stopping); the exit ends
	// supervision. It takes the place of any other cause.
	endStop
)

// ending is why the current run is ending; the zero value is endNone.
type ending struct {
	cause endCause
	gen   uint64    // endPodRestart: the generation whose kill ends the run
	probe probeKill // endProbeKill: which probe, and what follows
}

// waitKind is what the loop waits for while no run is in progress, as the
// kubelet tells CrashLoopBackOff from a container that waits for its pod.
type waitKind int

const (
	// The zero value: a run is in progress, or supervision is over
	// (waiting{}).
	_ waitKind = iota
	// waitBackoff: the container's back-off timer (waiting.timer), then
	// a start (phase BackingOff).
	waitBackoff
	// waitRound: a pod restart's round (waiting.round), then a start in
	// it (phase BackingOff).
	waitRound
	// waitOthers: the pod's other regular members to end
	// (waiting.ended), then the hand-over (phase Ended).
	waitOthers
	// waitRerun: an init container's re-run waits for the next pod
	// restart (phase Initialized).
	waitRerun
	// waitHold: the workload exited for good; only a pod restart or a
	// stop ends the wait (phase Holding).
	waitHold
	// waitCheck: the pre-restart check (waiting.check), then the restart
	// in place or the hand-over (phase BackingOff).
	waitCheck
	// waitGroup: the node agent's answer to a group restart request
	// (waiting.group): the restart, as a pod restart, or a hand-over
	// (phase BackingOff).
	waitGroup
)

// phase is the Phase a wait of this kind is reported as.
func (k waitKind) phase() contract.Phase {
	switch k {
	case waitBackoff, waitRound, waitCheck, waitGroup:
		return contract.PhaseBackingOff
	case waitOthers:
		return contract.PhaseEnded
	case waitRerun:
		return contract.PhaseInitialized
	case waitHold:
		return contract.PhaseHolding
	}
	return contract.PhaseRunning
}

// waiting is what the loop waits for; the zero value waits for nothing. Only
// the fields of its kind are set.
type waiting struct {
	kind waitKind
	// until is the earliest next start (waitBackoff, waitRound): State's
	// NextStartAt.
	until time.Time
	timer *time.Timer // waitBackoff
	round *podRound   // waitRound
	// ended is closed once the pod's other regular members have ended;
	// cancel stops that wait (waitOthers).
	ended  <-chan struct{}
	cancel func()
	check  *preCheck  // waitCheck
	group  *groupWait // waitGroup
}

func (w *waiting) backoffC() <-chan time.Time {
	if w.kind != waitBackoff {
		return nil
	}
	return w.timer.C
}

func (w *waiting) roundReady() <-chan struct{} {
	if w.kind != waitRound {
		return nil
	}
	return w.round.ready
}

func (w *waiting) endedC() <-chan struct{} {
	if w.kind != waitOthers {
		return nil
	}
	return w.ended
}

// leave stops waiting: it stops the back-off timer, leaves the round or
// stops waiting for the others, whichever the wait is.
func (w *waiting) leave() {
	switch w.kind {
	case waitBackoff:
		w.timer.Stop()
	case waitRound:
		w.round.leave()
	case waitOthers:
		if w.cancel != nil {
			w.cancel()
		}
	case waitCheck:
		w.check.abandon()
	case waitGroup:
		w.group.leave()
	}
	*w = waiting{}
}
