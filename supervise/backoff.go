package supervise

import (
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// backoff is the container's CrashLoopBackOff curve, for its restarts in
// place. Pod restarts take no step of it and wait none (enterRound). It
// owns the step and is advanced in one place, next, as the
// kubelet advances its curve only in doBackOff's backOff.Next
// (pkg/kubelet/kuberuntime/kuberuntime_manager.go and
// client-go util/flowcontrol/backoff.go Backoff.Next, k8s.io/kubernetes
// v1.37.2): the first start after a reset is immediate, then
// rules.Backoff's initial delay doubles up to its max, and a run of
// Backoff.ResetAfterDuration (10 min by default, the kubelet's
// HasExpiredFunc in pkg/kubelet/kubelet.go) starts the curve over.
type backoff struct {
	// n is the number of restarts since the curve was last reset: the next
	// one waits rules.Backoff.Delay(n). It is State.BackoffRestarts for
	// the container's curve.
	n int
	// key is the container's resources when the last step was taken
	// (resources.go; State.BackoffKey), "" when unknown.
	key string
}

// next returns the delay before the start that follows a run of ran
// under curve c, with the container's resources key now, and takes the
// step. A negative ran (no run yet) never resets the curve, since
// rules.Validate refuses a negative resetAfter. Resources other than
// those of the last step make a key the kubelet has no entry for: the
// curve starts over.
func (b *backoff) next(c rules.Backoff, ran time.Duration, key string) time.Duration {
	if ran >= c.ResetAfterDuration() || key != "" && b.key != "" && key != b.key {
		b.n = 0
	}
	if key != "" {
		b.key = key
	}
	d := c.Delay(b.n)
	b.n++
	return d
}

// resumed is the container's curve as an earlier supervisor of the same
// container left it (Options.Resume, from the status document's
// BackoffRestarts), with the step for that supervisor's last exit taken:
// the kubelet keeps one curve per container across all its exits. It
// returns the delay that exit asks for, measured from r.LastExit.
func resumed(c rules.Backoff, r *Resume, key string) (backoff, time.Duration) {
	b := backoff{n: r.BackoffRestarts, key: r.BackoffKey}
	delay := b.next(c, r.LastExit.Sub(r.LastStart), key)
	return b, delay
}
