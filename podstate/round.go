package podstate

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// A pod restart is a round, as the kubelet runs it: every container is
// stopped and removed first, then they start again in the pod's order,
// sidecars before regular containers. Here every member of the pod, having
// stopped its workload for generation N, records it with a marker file
// in pod-restarts/ and waits:
//
//  1. until every other member listed for the pod has a "stopped" marker
//     for N or later, or has no supervisor (no status document, or a
//     free liveness lock: see liveness.go), has ended for good (status
//     "exited") or is being stopped by the kubelet (status "stopping");
//     at most StopWait;
//  2. until every sidecar and init container re-run listed before it has
//     a "started" marker for N or later (or no supervisor, or has
//     ended), as the kubelet starts each init container, sidecar or not,
//     only once the one before it has started: for sidecars at most
//     SidecarWait after the first wait is over; for an
//     init container's re-run (contract.MemberInit) as long as it takes,
//     since the containers after an init container must not run before it
//     succeeded, unless the re-run failed for good (a "failed" marker for
//     N), which ends the wait and, through InitFailed, the member.
//
// Markers are made like generations, by link(2) from a complete file, and
// pruned with them.

const (
	// StopWait bounds the wait for the other members to stop: the pod
	// restart's grace period, after which every workload is SIGKILLed,
	// plus a margin for noticing the generation (up to a second when
	// polling) and reaping. A member missing at the end is logged.
	StopWait = supervise.PodRestartGrace + 5*time.Second
	// SidecarWait bounds a regular container's wait for the sidecars of
	// the new round to run.
	SidecarWait = 5 * time.Second
	// barrierPoll is how often a waiting member looks at the markers;
	// barrierFallback, how often it looks for the group's release when
	// a change of pod-restarts/ wakes it (sleepUntilChanged).
	barrierPoll     = 20 * time.Millisecond
	barrierFallback = 250 * time.Millisecond

	// forever stands for the wait on an init container's re-run, which
	// has no bound of its own: the kubelet restarts a re-run whose
	// supervisor died (it is a sidecar), and a pod being deleted stops
	// every member.
	forever = 100 * 365 * 24 * time.Hour
)

// roundConfig is what a Member needs for rounds beyond the state
// directory.
type roundConfig struct {
	// members lists the pod's members in start order; nil: the containers
	// with a status document, all taken as regular.
	members []contract.PodMember
	kind    string
	// listed: the member list names this container.
	listed bool
	set    bool
	log    supervise.Logger
	// beforeAnnounce records the announcement in the container's status
	// document before the generation file is created.
	beforeAnnounce func(n uint64, exitCode int32)

	mu      sync.Mutex
	ignored int
	lastLog time.Time
}

func (c *roundConfig) logf(msg string, args ...any) {
	if c.log != nil {
		c.log.Warn(msg, args...)
	}
}

// SetRound gives the member the pod's member list (EnvPodMembers, nil when
// unknown), the logger for round events and the hook that records an
// announcement in the container's status document before the generation
// file appears. Call it before the member is used.
func (m *Member) SetRound(members []contract.PodMember, log supervise.Logger, beforeAnnounce func(n uint64, exitCode int32)) {
	m.round.members, m.round.log, m.round.beforeAnnounce = members, log, beforeAnnounce
	m.round.kind, m.round.set = contract.MemberRegular, true
	for _, pm := range members {
		if pm.Name == m.name {
			m.round.kind, m.round.listed = pm.Kind, true
		}
	}
}

// Verify reports why g cannot be taken as a pod restart, nil when it can.
// Any container of the pod can create a generation file; one counts only
// when the container it names as its source shows, in its status document,
// that it announced this generation or a later one after an exit under a
// RestartAllContainers rule. (A writer with the UID of that container's
// supervisor can forge the document too; each member then still restarts
// at most once per generation, into ever newer ones, as fast as rounds go:
// there is no back-off between pod restarts, as upstream.)
//
// That holds for a generation naming this container too: its own
// announcements are recorded in its document before their file appears,
// and a file naming it that it did not announce stopped its own workload
// for nothing (TestForgedPodRestartsAreIgnored).
//
// A Member without SetRound verifies nothing.
func (m *Member) Verify(g statevol.Generation) error { return m.verify(g, m.Generation()) }

// verify is Verify against the generation current of this member's run,
// for a caller that holds the member's lock (Announce).
func (m *Member) verify(g statevol.Generation, current uint64) error {
	if !m.round.set || g.Source == m.name && g.N <= current {
		// Its own announcement, already taken: Accept drops it.
		return nil
	}
	if g.Group != nil {
		return m.verifyGroup(g)
	}
	if err := statevol.CheckContainerName(g.Source); err != nil {
		return fmt.Errorf("generation %d names no container as its source", g.N)
	}
	st, err := statevol.ReadStatus(m.dir, g.Source)
	if err != nil {
		return fmt.Errorf("generation %d: status of its source %q: %w", g.N, g.Source, err)
	}
	if st.Announced < g.N {
		return fmt.Errorf("generation %d: its source %q announced no generation above %d", g.N, g.Source, st.Announced)
	}
	if !restartsAll(st.LastExit) && !restartsAll(st.LastRestart) {
		return fmt.Errorf("generation %d: its source %q shows no exit under a RestartAllContainers rule", g.N, g.Source)
	}
	return nil
}

func restartsAll(e *statevol.Exit) bool {
	return e != nil && e.Action == rules.ActionRestartAllContainers
}

// ignore logs a generation that failed Verify, at most once every 10
// seconds with the count since, so that a flood of forged files costs no
// flood of log lines.
func (m *Member) ignore(g statevol.Generation, err error) {
	c := &m.round
	c.mu.Lock()
	c.ignored++
	n := c.ignored
	now := time.Now()
	if now.Sub(c.lastLog) < 10*time.Second {
		c.mu.Unlock()
		return
	}
	c.lastLog, c.ignored = now, 0
	c.mu.Unlock()
	c.logf("pod restart file ignored: not announced by the container it names", "generation", g.N, "source", g.Source, "err", err, "ignored", n)
}

// mark creates the marker of generation n holding data; one that exists
// already is fine.
func (m *Member) mark(n uint64, what string, data []byte) error {
	return statevol.Mark(m.dir, n, what, m.name, data)
}

// Started records that this container's run of generation n has started.
func (m *Member) Started(n uint64) {
	if err := m.mark(n, statevol.MarkStarted, nil); err != nil {
		m.round.logf("cannot record the start for the pod restart", "generation", n, "err", err)
	}
}

// endedPoll is how often a member in phase Ended looks at the others.
const endedPoll = 250 * time.Millisecond

// OthersEnded returns, for a regular member the member list names, a
// channel closed once every other regular member listed has ended (see
// othersEnded) under the pod's restartPolicy pod; nil when there is none
// that still runs, or for any other member (the kubelet restarts sidecars
// anyway, init re-runs never end their container, and a container without
// a member list, or left out of it, may end as it would alone).
func (m *Member) OthersEnded(pod rules.RestartPolicy) (ended <-chan struct{}, cancel func()) {
	if !m.round.listed || m.round.kind != contract.MemberRegular {
		return nil, nil
	}
	var others []string
	for _, pm := range m.round.members {
		if pm.Kind == contract.MemberRegular && pm.Name != m.name {
			others = append(others, pm.Name)
		}
	}
	if m.othersEnded(others, pod) {
		return nil, nil
	}
	c, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		tick := time.NewTicker(endedPoll)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if m.othersEnded(others, pod) {
					close(c)
					return
				}
			}
		}
	}()
	return c, func() { once.Do(func() { close(done) }) }
}

// othersEnded reports whether none of the named members still runs or
// will run again on its own: each has exited, is being stopped, or waits
// in phase Ended itself (or has a status document this reader refuses),
// or its supervisor is dead (its liveness lock is free, whatever its
// document says: a container killed whole writes no last document). A
// member without a status document has not started yet (its image may
// still be pulled) and will run; held members (their kubelet would
// restart them) still count as running, and so does a member that the
// kubelet restarts under the pod's policy pod (restartedByKubelet): the
// pod goes on.
func (m *Member) othersEnded(names []string, pod rules.RestartPolicy) bool {
	for _, name := range names {
		ms := readMember(m.dir, name)
		if ms.missingDoc() {
			return false
		}
		if ms.err != nil || ms.ended {
			// An ended member's marker stays after its exit (until the
			// container's next supervisor starts), so that the document
			// it may not have been able to write is not needed.
			continue
		}
		if ms.restartedByKubelet(pod) {
			return false
		}
		if ms.live == statevol.Dead {
			continue
		}
		switch ms.doc.State {
		case contract.PhaseExited, contract.PhaseStopping, contract.PhaseEnded:
		default:
			return false
		}
	}
	return true
}

// restartedByKubelet reports whether the member's container has ended in
// a way that the kubelet answers with a new start under the pod's
// restartPolicy pod (ShouldContainerBeRestarted,
// pkg/kubelet/container/helpers.go:90-126, v1.37.2): its supervisor
// handed an exit over that the policy restarts, or was killed with the
// whole container (a SIGKILL, 137) before it could write a last document.
// A stop is no such exit: the kubelet, or the runtime, is ending the
// container.
func (s memberState) restartedByKubelet(pod rules.RestartPolicy) bool {
	switch s.doc.State {
	case contract.PhaseExited:
		e := s.doc.LastExit
		return e != nil && !e.Stopped && rules.PolicyRestarts(pod, e.Code)
	case contract.PhaseStopping:
		return false
	}
	return s.live == statevol.Dead && rules.PolicyRestarts(pod, 128+int32(unix.SIGKILL))
}

// Failed records that this container's run of generation n failed for
// good with exitCode: the re-run of an init container whose exit is not
// restarted. The code is written into the marker itself, so that the
// members after it, which end with it (InitFailed), read it with the
// marker: the status document that also holds it is written off the
// restart path and may come later.
func (m *Member) Failed(n uint64, exitCode int) {
	if err := m.mark(n, statevol.MarkFailed, []byte(strconv.Itoa(exitCode)+"\n")); err != nil {
		m.round.logf("cannot record the failed init container re-run; the containers after it will wait for it", "generation", n, "err", err)
	}
}

// InitFailed reports whether an init container's re-run listed before this
// member failed for good in generation n (or later), with the exit code its
// failed marker holds (Failed), else its status document's (a marker an
// earlier release wrote is empty), else 1.
func (m *Member) InitFailed(n uint64) (exitCode int, failed bool) {
	marks := m.markers(n)
	for _, pm := range m.startersBefore() {
		if pm.Kind != contract.MemberInit || marks[statevol.MarkFailed][pm.Name] == 0 {
			continue
		}
		if code, ok := m.markedCode(marks[statevol.MarkFailed][pm.Name], pm.Name); ok {
			return code, true
		}
		if st, err := statevol.ReadStatus(m.dir, pm.Name); err == nil && st.LastExit != nil && st.LastExit.Code != 0 {
			return int(st.LastExit.Code), true
		}
		return 1, true
	}
	return 0, false
}

// maxMarkerSize bounds what is read of a marker: an exit code and a
// newline.
const maxMarkerSize = 16

// markedCode reads the exit code a failed marker of generation n holds:
// 1 to 255, as a container's exit code is.
func (m *Member) markedCode(n uint64, container string) (int, bool) {
	data, err := statevol.MarkerData(m.dir, n, statevol.MarkFailed, container, maxMarkerSize)
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || code < 1 || code > 255 {
		return 0, false
	}
	return code, true
}

// Stopped records that this container's workload is stopped for
// generation n and returns a channel closed when it may start again, after
// the waits of the round. cancel ends the wait without closing the
// channel.
func (m *Member) Stopped(n uint64) (ready <-chan struct{}, cancel func()) {
	if err := m.mark(n, statevol.MarkStopped, nil); err != nil {
		m.round.logf("cannot record the stop for the pod restart; the others will wait for it until their bound", "generation", n, "err", err)
	}
	c := make(chan struct{})
	done := make(chan struct{})
	var once sync.Once
	go m.wait(n, c, done)
	return c, func() { once.Do(func() { close(done) }) }
}

// wait carries out the round's waits for generation n and closes ready.
func (m *Member) wait(n uint64, ready chan<- struct{}, done <-chan struct{}) {
	tick := time.NewTicker(barrierPoll)
	defer tick.Stop()
	sleepUntil := func(deadline time.Time, cond func() bool) bool {
		for !cond() && time.Now().Before(deadline) {
			select {
			case <-done:
				return false
			case <-tick.C:
			}
		}
		return true
	}
	var missing []string
	stopDeadline := time.Now().Add(StopWait)
	if !sleepUntil(stopDeadline, func() bool {
		missing = m.missing(n, statevol.MarkStopped)
		return len(missing) == 0
	}) {
		return
	}
	if len(missing) > 0 {
		m.round.logf("pod restart: members did not stop within the bound; starting without them", "generation", n, "missing", strings.Join(missing, ","), "waited", StopWait)
	}
	if m.groupRound(n) {
		// A group restart: the pod has stopped; no member starts before
		// the agent says every pod of the group has (group.go).
		if err := m.mark(n, statevol.MarkGrouped, nil); err != nil {
			m.round.logf("cannot record the pod's stop for the group restart; the node agent will release the group at its bound", "generation", n, "err", err)
		}
		if !m.sleepUntilChanged(done, time.Now().Add(statevol.GroupReleaseWait), func() bool { return m.released(n) }) {
			return
		}
		if !m.released(n) {
			m.round.logf("group restart: no release from the node agent within the bound; starting", "generation", n, "waited", statevol.GroupReleaseWait)
		}
	}
	if starters := m.startersBefore(); len(starters) > 0 {
		sidecarDeadline := time.Now().Add(SidecarWait)
		var sidecars, inits []string
		failed := false
		if !sleepUntil(time.Now().Add(forever), func() bool {
			sidecars, inits, failed = m.notStarted(n, starters)
			return failed || len(inits) == 0 && (len(sidecars) == 0 || !time.Now().Before(sidecarDeadline))
		}) {
			return
		}
		if !failed && len(sidecars) > 0 {
			m.round.logf("pod restart: sidecars did not start within the bound; starting without them", "generation", n, "missing", strings.Join(sidecars, ","), "waited", SidecarWait)
		}
	}
	select {
	case <-done:
	default:
		close(ready)
	}
}

// sleepUntilChanged is wait's sleepUntil for a condition on pod-restarts/
// alone (the node agent's release): with inotify it looks when the
// directory changes and every barrierFallback, polling every barrierPoll.
// A group's release can take seconds, and at 20 ms a look 512 supervisors
// waiting for one kept 2 cores at a load of 540.
func (m *Member) sleepUntilChanged(done <-chan struct{}, deadline time.Time, cond func() bool) bool {
	poll, changed := barrierPoll, (<-chan struct{})(nil)
	if m.w != nil && !m.w.Polling() {
		poll, changed = barrierFallback, m.w.changed
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for !cond() && time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		case <-tick.C:
		case <-changed:
		}
	}
	return true
}

// markers returns, per kind of marker, the containers that have one for
// generation n or later, each with the highest generation it has one for
// (0: none).
func (m *Member) markers(n uint64) map[string]map[string]uint64 {
	return statevol.LatestMarkers(m.dir, n)
}

// gone reports whether member pm has nothing left to wait for: no
// supervisor, ended, or being stopped by the kubelet (a stopping
// supervisor takes no pod restart). A member whose supervisor is dead
// (its liveness lock is free) is gone too, whatever its document says,
// except an init container's re-run: the kubelet restarts it (it is a
// sidecar), and the containers after it must not start before it ran.
func (m *Member) gone(pm contract.PodMember) bool {
	ms := readMember(m.dir, pm.Name)
	switch {
	case ms.missingDoc():
		return true
	case ms.err != nil:
		return false
	case ms.live == statevol.Dead && pm.Kind != contract.MemberInit:
		return true
	}
	return ms.doc.State == contract.PhaseExited || ms.doc.State == contract.PhaseStopping
}

// missing returns the members, other than this one, that have no
// what-marker for generation n or later and still have a supervisor that
// has not ended.
func (m *Member) missing(n uint64, what string) []string {
	have := m.markers(n)[what]
	members := m.round.members
	if members == nil {
		members = m.statusMembers()
	}
	var out []string
	for _, pm := range members {
		if pm.Name == m.name || have[pm.Name] != 0 || m.gone(pm) {
			continue
		}
		out = append(out, pm.Name)
	}
	return out
}

// startersBefore returns the sidecars and init container re-runs listed
// before this member: the kubelet starts the next container only once
// each of them has started. Without a member list there are none.
func (m *Member) startersBefore() []contract.PodMember {
	var out []contract.PodMember
	for _, pm := range m.round.members {
		if pm.Name == m.name {
			break
		}
		if pm.Kind == contract.MemberSidecar || pm.Kind == contract.MemberInit {
			out = append(out, pm)
		}
	}
	return out
}

// notStarted returns the starters that have not started generation n and
// have a supervisor that has not ended, sidecars and init re-runs apart,
// and whether an init re-run among them failed for good.
func (m *Member) notStarted(n uint64, starters []contract.PodMember) (sidecars, inits []string, failed bool) {
	marks := m.markers(n)
	for _, pm := range starters {
		switch {
		case marks[statevol.MarkStarted][pm.Name] != 0:
		case pm.Kind == contract.MemberInit && marks[statevol.MarkFailed][pm.Name] != 0:
			failed = true
		case m.gone(pm):
		case pm.Kind == contract.MemberInit:
			inits = append(inits, pm.Name)
		default:
			sidecars = append(sidecars, pm.Name)
		}
	}
	return sidecars, inits, failed
}

// statusMembers stands in for an unknown member list: the containers with
// a status document, as regular containers.
func (m *Member) statusMembers() []contract.PodMember {
	all, _ := statevol.ReadAll(m.dir)
	out := make([]contract.PodMember, 0, len(all))
	for _, s := range all {
		out = append(out, contract.PodMember{Name: s.Container, Kind: contract.MemberRegular})
	}
	return out
}
