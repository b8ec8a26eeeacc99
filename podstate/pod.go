// Package podstate is one supervised container's part in its pod's state
// volume: it plugs into supervise.Options as it is (Pod). It keeps the
// container's status document current off the restart path (Recorder),
// resumes the back-off, restart count and limits an earlier supervisor of
// the container left, holds the container's liveness lock, which the
// kernel releases when its supervisor dies (liveness.go), runs the
// container's side of pod-wide restarts, the RestartAllContainers
// emulation (Member: generations watched, verified and taken part in as
// rounds, round.go), asks the node agent for group restarts (group.go), and
// writes the container's termination message on final exit
// (termination.go). The files themselves and the atomic operations on
// them are package statevol's, which the node agent reads too.
//
// The supervisors run in different containers, sharing nothing but the
// directory; the one lock, each supervisor's flock on its liveness file,
// is never waited for: it tells the others that the supervisor lives.
package podstate

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// Pod is one supervised container's part in the pod's state directory. It
// plugs into supervise.Options as it is: Restarter is the Pod field
// (pod-wide restarts) and Observe the OnChange hook (the container's
// status document).
//
// A nil *Pod is valid and stands for a container without a state
// directory: no status document, and RestartAllContainers restarts only
// this container.
type Pod struct {
	log    supervise.Logger
	resume *supervise.Resume
	// handedOver is the exit the earlier supervisor of this container
	// handed over, with the start of its run, nil when there is none.
	handedOver *statevol.Exit
	lastStart  time.Time
	// restartsBefore is the in-place restarts of the container's earlier
	// supervisors (Status.RestartsTotal).
	restartsBefore int
	// limits is what the earlier supervisor's limits left, nil when it
	// left nothing.
	limits *supervise.LimitState
	live   *statevol.Liveness
	// dir and name locate the container's ended marker; endedMarked says
	// this supervisor made it (Observe).
	dir, name   string
	endedMarked bool
	rec         *Recorder
	member      *Member
	pending     chan uint64
}

// Open joins the state directory dir as container name. An empty dir
// returns a nil *Pod.
func Open(dir, name string, log supervise.Logger) (*Pod, error) {
	return OpenMember(dir, name, nil, WatchOptions{}, log)
}

// OpenMember is Open for a member of a pod whose member list is known
// (contract.EnvPodMembers); nil members: the containers that have a
// status document. watch says how pod-restarts/ is watched (PodRestartWatch).
func OpenMember(dir, name string, members []contract.PodMember, watch WatchOptions, log supervise.Logger) (*Pod, error) {
	if dir == "" {
		return nil, nil
	}
	if err := statevol.CheckContainerName(name); err != nil {
		return nil, err
	}
	p := &Pod{log: log}
	// An emptyDir's root is 0777: with the sticky bit no other UID can
	// move status/ or pod-restarts/ aside and put its own in their place.
	// Only root (or the root's owner) may add it; anyone else leaves it.
	statevol.Seal(dir, false)
	// The document an earlier supervisor of this container left behind
	// (the kubelet restarted the container after a hand-over) carries the
	// container's back-off and its restart count. Read it before it is
	// replaced.
	prev, perr := statevol.ReadOwnStatus(dir, name)
	if err := perr; err == nil {
		p.restartsBefore = min(max(prev.RestartsTotal, prev.Restarts, 0), maxRestartsTotal)
		p.limits = limitsFrom(prev.Limits, time.Now())
		if prev.LastExit != nil {
			p.resumeFrom(prev, time.Now())
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		log.Warn("cannot read the container's previous status document; its back-off starts over", "err", err)
	}
	// The lock is held before the first document says "running", so that
	// a document of this supervisor is never read while its lock is free.
	live, err := statevol.HoldLiveness(dir, name)
	if err != nil {
		log.Warn("cannot hold the liveness lock; if this supervisor is killed, the pod's other containers go by its status document alone", "err", err)
	}
	p.live = live
	// An ended marker of the container's earlier supervisor: this one
	// runs (statevol.MarkEnded).
	_ = statevol.MarkEnded(dir, name, false)
	p.dir, p.name = dir, name
	initial := statevol.Status{
		Container: name, State: contract.PhaseRunning, RestartsTotal: p.restartsBefore,
		SupervisorPID: os.Getpid(), SupervisorVersion: contract.Version,
	}
	if perr == nil && restartsAll(prev.LastRestart) {
		// What a late member checks a generation this container
		// announced against (Member.Verify).
		initial.Announced, initial.LastRestart = prev.Announced, prev.LastRestart
	}
	rec, err := NewRecorder(dir, initial, log)
	if err != nil {
		p.live.Release()
		return nil, err
	}
	p.rec = rec
	m, err := Join(dir, name, watch)
	if err != nil {
		// The status document still works; pod restarts do not.
		log.Warn("cannot watch for pod restarts; RestartAllContainers will restart this container only", "dir", dir, "err", err)
		return p, nil
	}
	m.SetRound(members, log, func(n uint64, exitCode int32) {
		err := rec.Sync(func(s *statevol.Status) {
			s.Announced = n
			s.LastExit = &statevol.Exit{Code: exitCode, Action: rules.ActionRestartAllContainers, At: time.Now()}
		})
		if err != nil {
			log.Warn("cannot record the announcement in the status document; the other containers will not accept it", "generation", n, "err", err)
		}
	})
	if m.round.kind == contract.MemberInit && m.Generation() > 0 {
		// An init container's re-run starting in the middle of the pod's
		// life (the kubelet started it after the init container, or
		// restarted it after its supervisor died) takes the round under
		// way as done: nothing after it may wait for a run it will not
		// make.
		m.Started(m.Generation())
	}
	if m.Polling() && !watch.ForcePoll {
		// inotify was wanted and could not be had: on a node whose
		// containers run as one user, that user's inotify instances
		// (fs.inotify.max_user_instances, 128 by default) run out, and
		// every pod restart is then seen up to a poll late.
		log.Warn("cannot watch for pod restarts with inotify (fs.inotify.max_user_instances reached?); looking every poll interval instead", "interval", DefaultPollInterval)
	}
	p.member = m
	p.pending = make(chan uint64)
	go func() {
		for g := range m.Restarts() {
			if err := m.Verify(g); err != nil {
				m.ignore(g, err)
				continue
			}
			p.pending <- g.N
		}
	}()
	return p, nil
}

// maxRestartsTotal bounds the restart count taken from a document, which
// any process of the container's UID can write: a count near the largest
// int would overflow at the next restart.
const maxRestartsTotal = 1 << 40

// maxResumedBackoff bounds the back-off step taken from a document: the
// delay doubles at each step and is capped at the back-off's maximum long
// before this, so a higher step says nothing more.
const maxResumedBackoff = 64

// resumeFrom takes the back-off and the exit the earlier supervisor left
// in prev. Every time in it is a writer's claim: a time after now (a
// document dated 2100, or a node clock set back) is taken as now, and a
// start after the exit it ended as the exit, so that the resumed delay is
// never longer than the back-off's maximum from now (the back-off's Delay
// is capped at it, and the wait is measured from the exit).
func (p *Pod) resumeFrom(prev statevol.Status, now time.Time) {
	exit := *prev.LastExit
	if exit.At.After(now) {
		exit.At = now
	}
	start := prev.StartedAt
	if start.After(exit.At) {
		start = exit.At
	}
	p.handedOver, p.lastStart = &exit, start
	p.resume = &supervise.Resume{
		BackoffRestarts: min(max(prev.BackoffRestarts, 0), maxResumedBackoff),
		BackoffKey:      validKey(prev.BackoffKey),
		LastStart:       start, LastExit: exit.At, Stopped: exit.Stopped,
	}
}

// limitsFrom takes the limits' state from a document, which any process
// of the container's UID can write: counts bounded, at most
// supervise.MaxBudgetRecent times and none after now (a budget's window
// counts back from now, so a time to come would never leave it), and a
// digest that is not one (32 hex digits) is dropped (the next look then starts the count
// over, as a changed file does).
func limitsFrom(l *statevol.Limits, now time.Time) *supervise.LimitState {
	if l == nil {
		return nil
	}
	out := &supervise.LimitState{
		BudgetRestarts:  min(max(l.BudgetRestarts, 0), maxRestartsTotal),
		StalledRestarts: min(max(l.StalledRestarts, 0), maxRestartsTotal),
	}
	recent := l.BudgetRecent
	if len(recent) > supervise.MaxBudgetRecent {
		recent = recent[len(recent)-supervise.MaxBudgetRecent:]
	}
	for _, t := range recent {
		if t.After(now) {
			t = now
		}
		out.BudgetRecent = append(out.BudgetRecent, t)
	}
	if d := l.ProgressDigest; d == "absent" || isHexDigest(d) {
		out.ProgressDigest = d
	}
	return out
}

func isHexDigest(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Limits returns what the limits of an earlier supervisor of this
// container left, nil when there is nothing.
func (p *Pod) Limits() *supervise.LimitState {
	if p == nil {
		return nil
	}
	return p.limits
}

// ExitStatus returns the status the container exits with, given final,
// the supervisor's last state, and status, what supervise.Run returned.
// A supervisor that ran no workload to its end (stopped while it waited
// out the back-off it resumed) exits with the code the earlier supervisor
// handed over, not 0: the kubelet would show that exit as the container's
// last termination too, since no run followed it.
func (p *Pod) ExitStatus(final supervise.State, status int) int {
	if p == nil || p.handedOver == nil || final.LastExit != nil || status != 0 || final.Phase != contract.PhaseExited {
		return status
	}
	return int(p.handedOver.Code)
}

// Resume returns the back-off an earlier supervisor of this container left,
// nil when there is none.
func (p *Pod) Resume() *supervise.Resume {
	if p == nil {
		return nil
	}
	return p.resume
}

// PodGeneration returns the function supervise.Options.PodGeneration
// takes: the pod restart generation this container's runs belong to; nil
// when the container takes no part in pod restarts.
func (p *Pod) PodGeneration() func() uint64 {
	if p == nil || p.member == nil {
		return nil
	}
	return p.member.Generation
}

// Restarter returns the supervise.PodRestarter, nil when this container
// cannot take part in pod restarts.
func (p *Pod) Restarter() supervise.PodRestarter {
	if p == nil || p.member == nil {
		return nil
	}
	return restarter{p}
}

// restarter adapts Member's generation-typed API to the plain numbers of
// supervise.PodRestarter, which knows nothing of files.
type restarter struct{ p *Pod }

func (r restarter) Announce(exitCode int32) (uint64, error) {
	g, won, err := r.p.member.Announce(exitCode)
	if err == nil {
		r.p.log.Info("pod restart announced", "generation", g.N, "announcedHere", won)
	}
	return g.N, err
}

func (r restarter) Stopped(gen uint64) (<-chan struct{}, func()) { return r.p.member.Stopped(gen) }

func (r restarter) Started(gen uint64) { r.p.member.Started(gen) }

func (r restarter) Failed(gen uint64, exitCode int) { r.p.member.Failed(gen, exitCode) }

func (r restarter) OthersEnded(pod rules.RestartPolicy) (<-chan struct{}, func()) {
	return r.p.member.OthersEnded(pod)
}

func (r restarter) InitFailed(gen uint64) (int, bool) { return r.p.member.InitFailed(gen) }

func (r restarter) Pending() <-chan uint64 { return r.p.pending }

func (r restarter) Accept(gen uint64) bool { return r.p.member.Accept(statevol.Generation{N: gen}) }

// Observe records a state change in the status document; the recorder
// writes it off the restart path.
func (p *Pod) Observe(st supervise.State) {
	if p == nil {
		return
	}
	var gen uint64
	if p.member != nil {
		gen = p.member.Generation()
		if st.Phase == contract.PhaseStopping || st.Phase == contract.PhaseExited || st.Terminating {
			// A stopping, terminating or exited supervisor ignores pod restarts, and
			// a watch removed now, a millisecond or more before Close,
			// spares the container's exit the kernel's wait for it
			// (dirwatch.Watcher.Unwatch).
			p.member.unwatch()
		}
	}
	p.markEnd(st.Phase)
	p.rec.Update(func(s *statevol.Status) { fill(s, st, gen, p.restartsBefore) })
}

// markEnd keeps the ended marker in step with the phase: made when the
// workload has ended for good, before the document that says so is
// written (it may not be: a full volume), removed when a pod restart
// starts it again, and left at the exit that follows, for the members
// still waiting (statevol.MarkEnded).
func (p *Pod) markEnd(phase contract.Phase) {
	switch {
	case phase == contract.PhaseEnded && !p.endedMarked:
		if err := statevol.MarkEnded(p.dir, p.name, true); err != nil {
			p.log.Warn("cannot mark the container ended; the others learn it from the status document alone", "err", err)
			return
		}
		p.endedMarked = true
	case p.endedMarked && phase != contract.PhaseEnded && phase != contract.PhaseExited && phase != contract.PhaseStopping:
		if err := statevol.MarkEnded(p.dir, p.name, false); err != nil {
			p.log.Warn("cannot remove the container's ended marker", "err", err)
			return
		}
		p.endedMarked = false
	}
}

// Close writes the final document, stops watching and returns the final
// status; on a nil *Pod it returns the status final describes.
func (p *Pod) Close(final supervise.State) statevol.Status {
	if p == nil {
		var s statevol.Status
		fill(&s, final, 0, 0)
		return s
	}
	p.Observe(final)
	if final.LastExit == nil && p.handedOver != nil {
		// No run ended here: the next supervisor resumes from the
		// exit and the back-off this one took over.
		p.rec.Update(func(s *statevol.Status) {
			s.LastExit = p.handedOver
			if s.StartedAt.IsZero() {
				s.StartedAt = p.lastStart
			}
		})
	}
	err := p.rec.Close()
	if n := p.rec.FailedWrites(); err != nil {
		p.log.Warn("cannot write the final status document", "err", err, "failedWrites", n)
	} else if n > 0 {
		p.log.Warn("the status document was written in the end; earlier writes failed", "failedWrites", n)
	}
	if p.member != nil {
		p.member.Close()
	}
	// After the final document: a member that finds the lock free reads
	// this container's last word.
	p.live.Release()
	return p.rec.Status()
}

func fill(s *statevol.Status, st supervise.State, gen uint64, restartsBefore int) {
	s.State = st.Phase
	s.Restarts, s.PodRestarts, s.Generation = st.Restarts, st.PodRestarts, gen
	s.RestartsTotal = restartsBefore + st.Restarts
	s.LastExit, s.LastRestart = exitOf(st.LastExit), exitOf(st.LastRestart)
	s.StartedAt, s.NextStartAt = st.StartedAt, st.NextStartAt
	s.BackoffRestarts = st.BackoffRestarts
	s.BackoffKey = st.BackoffKey
	s.Started = st.Started
	s.Terminating = st.Terminating
	s.Limits = nil
	if l := st.Limits; l.BudgetRestarts != 0 || l.ProgressDigest != "" || l.StalledRestarts != 0 {
		s.Limits = &statevol.Limits{BudgetRestarts: l.BudgetRestarts, BudgetRecent: l.BudgetRecent, ProgressDigest: l.ProgressDigest, StalledRestarts: l.StalledRestarts}
	}
	s.HandOver = nil
	if h := st.HandOver; h != nil {
		s.HandOver = &statevol.HandOver{Reason: h.Reason, Message: h.Message}
	}
}

func exitOf(e *supervise.Exit) *statevol.Exit {
	if e == nil {
		return nil
	}
	x := &statevol.Exit{Code: int32(e.Code), Action: e.Action, PodRestart: e.PodRestart, Stopped: e.Stopped, Reason: e.Reason, At: e.At}
	if e.Signal != 0 {
		x.Signal = unix.SignalName(e.Signal)
	}
	if e.Rule >= 0 {
		r := e.Rule
		x.Rule = &r
	}
	return x
}

// validKey is a back-off key from a document, "" when it is not one.
func validKey(k string) string {
	if supervise.ValidBackoffKey(k) {
		return k
	}
	return ""
}
