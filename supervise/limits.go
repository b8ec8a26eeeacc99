package supervise

import (
	"encoding/hex"
	"errors"
	"hash/fnv"
	"os"
	"strconv"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The limits (rules.Limits) turn an exit the rules would restart in place
// into a hand-over, so that the kubelet's restartCount moves and the pod's
// policy decides: an exit code the user named, a spent restart budget, a
// workload that makes no progress, a failing pre-restart check
// (precheck.go). They are asked in act, for every exit whose handling is
// RestartInPlace (a rule's, the container policy's, a probe kill's), in
// that order, the cheap ones first; nothing else changes.

// Reasons of a hand-over the limits caused (State.HandOver), in the
// CamelCase of the kubelet's container reasons, so that the node agent's
// Event can carry them as they are.
const (
	ReasonHandOverExitCode       = "HandOverExitCode"
	ReasonRestartBudgetExhausted = "RestartBudgetExhausted"
	ReasonProgressStalled        = "ProgressStalled"
	ReasonPreRestartCheckFailed  = "PreRestartCheckFailed"
	ReasonEscalationExhausted    = "EscalationExhausted"
	// ReasonInitContainerOOMKilled: not a limit, but the same kind of
	// hand-over: an init container that had an OOM kill cannot be
	// initialized in place (act, oom.go).
	ReasonInitContainerOOMKilled = "InitContainerOOMKilled"
)

// HandOver is why an exit that the rules would have restarted in place
// was handed to the kubelet.
type HandOver struct {
	Reason  string // one of the Reason constants
	Message string // one line, bounded
}

// MaxBudgetRecent bounds LimitState.BudgetRecent, and so a restart budget
// with a window (rules.MaxWindowedRestarts).
const MaxBudgetRecent = rules.MaxWindowedRestarts

// maxProgressFile bounds the read of the progress file, which the workload
// writes: a checkpoint's iteration is a few bytes.
const maxProgressFile = 64 << 10

// LimitState is what the limits remember, carried from one supervisor of
// the container to the next (Resume.Limits) through the status document,
// so that a hand-over and the kubelet's restart reset none of it: nothing
// resets a native container's restartCount either, and a budget that
// started over with every kubelet restart would hide maxRestarts+1 crashes
// behind each step of restartCount.
type LimitState struct {
	// BudgetRestarts counts the in-place restarts this container's own
	// exits caused (pod restarts announced by others are not its own).
	BudgetRestarts int
	// BudgetRecent are the times of the most recent of them, oldest
	// first, at most MaxBudgetRecent: what a budget's window counts.
	BudgetRecent []time.Time
	// ProgressDigest is the FNV-1a 128 digest of the progress file when it was
	// last read ("absent" when there was none, "" when never read), and
	// StalledRestarts the in-place restarts since it last changed.
	ProgressDigest  string
	StalledRestarts int
}

// limit returns why the exit must be handed over instead of restarted in
// place, nil when the limits allow the restart. It updates the progress
// count, which the file's content decides whatever follows.
func (s *supervisor) limit(cfg rules.Config, exit *Exit) *HandOver {
	if cfg.HandsOver(int32(exit.Code)) {
		return &HandOver{ReasonHandOverExitCode, "exit code " + strconv.Itoa(exit.Code) + " is in handOverExitCodes"}
	}
	if p := cfg.Progress; p != nil {
		d := s.progressDigest(p.File)
		if d != s.limits.ProgressDigest {
			s.limits.ProgressDigest, s.limits.StalledRestarts = d, 0
		}
		if n := s.limits.StalledRestarts; n >= int(p.MaxStalledRestarts) {
			return &HandOver{ReasonProgressStalled, strconv.Itoa(n) + " in-place restarts without a change of " + clipText(p.File, 256) +
				" (progress.maxStalledRestarts " + strconv.Itoa(int(p.MaxStalledRestarts)) + ")"}
		}
	}
	if b := cfg.RestartBudget; b != nil {
		if n, max := s.budgetUsed(b, exit.At), b.Max(); n >= max {
			within := ""
			if w := b.WindowDuration(); w > 0 {
				within = " within " + w.String()
			}
			return &HandOver{ReasonRestartBudgetExhausted, strconv.Itoa(n) + " in-place restarts" + within +
				" (restartBudget.maxRestarts " + strconv.Itoa(max) + ")"}
		}
	}
	return nil
}

// budgetUsed is how many in-place restarts count against b at now: all of
// them, or those of the window before now.
func (s *supervisor) budgetUsed(b *rules.RestartBudget, now time.Time) int {
	return s.ownRestarts(b.WindowDuration(), now)
}

// ownRestarts is how many in-place restarts this container's own exits
// caused: all of them (w 0), or those of the w before now.
func (s *supervisor) ownRestarts(w time.Duration, now time.Time) int {
	if w <= 0 {
		return s.limits.BudgetRestarts
	}
	n := 0
	for _, t := range s.limits.BudgetRecent {
		if now.Sub(t) < w {
			n++
		}
	}
	return n
}

// escalate applies the escalation's step to a verdict whose rule restarts
// in place: the step's action for the next own restart, or a hand-over
// past the last step.
func (s *supervisor) escalate(e *rules.Escalation, v *verdict, exit *Exit) (step int, h *HandOver) {
	used := s.ownRestarts(e.WindowDuration(), exit.At)
	st, k, ok := e.Step(used)
	if !ok {
		within := ""
		if w := e.WindowDuration(); w > 0 {
			within = " within " + w.String()
		}
		return k, &HandOver{ReasonEscalationExhausted, strconv.Itoa(used) + " in-place restarts" + within +
			" (escalation's " + strconv.Itoa(len(e.Steps)) + " steps allow " + strconv.Itoa(e.Total()) + ")"}
	}
	v.decision.Action, exit.Action = st.Action, st.Action
	return k, nil
}

// recordRestart is the one place that counts an in-place restart of this
// container (State.Restarts): from exit (nil when the workload was not
// running: a pod restart another member asked for, which also leaves
// LastRestart as it was), pod-wide or not (State.PodRestarts), and
// spending the limits' budget when this container's own exit asked for it
// (a rule's restart, the group restart it requested), not when a pod
// restart's kill ended the run.
func (s *supervisor) recordRestart(exit *Exit, podWide, budget bool) {
	s.hist.restarts++
	if podWide {
		s.hist.podRestarts++
	}
	if budget {
		s.spendBudget(s.config(), exit.At)
	}
	if exit != nil {
		s.hist.lastRestart = exit
	}
}

// spendBudget records, for the limits, an in-place restart the
// container's own exit caused, at t.
func (s *supervisor) spendBudget(cfg rules.Config, t time.Time) {
	s.limits.BudgetRestarts++
	s.limits.BudgetRecent = append(s.limits.BudgetRecent, t)
	if n := len(s.limits.BudgetRecent); n > MaxBudgetRecent {
		s.limits.BudgetRecent = append([]time.Time(nil), s.limits.BudgetRecent[n-MaxBudgetRecent:]...)
	}
	if cfg.Progress != nil {
		s.limits.StalledRestarts++
	}
}

// baselineProgress reads the progress file before the container's first
// run, so that the first exit is measured against what the run found.
func (s *supervisor) baselineProgress() {
	if p := s.config().Progress; p != nil && s.limits.ProgressDigest == "" {
		s.limits.ProgressDigest = s.progressDigest(p.File)
	}
}

// progressDigest is the FNV-1a 128 digest of the progress file, "absent"
// when there is none. It need not be a cryptographic hash: the file is the
// workload's own, and a workload that wanted to look as if it made
// progress could simply write to it (crypto/sha256 cost the stripped
// binary 152 KB more than hash/fnv). The file is still read as an
// adversary's: a regular file of at most maxProgressFile bytes, no
// symbolic link, never blocking; a file refused counts as absent, and
// says so in the log.
func (s *supervisor) progressDigest(path string) string {
	data, err := boundedfile.Read(path, "progress file", maxProgressFile, false)
	if errors.Is(err, os.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		s.log.Warn("cannot read the progress file; taken as absent", "file", path, "err", err.Error())
		return "absent"
	}
	h := fnv.New128a()
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// clipText cuts s to at most max bytes for a log line or a message.
func clipText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
