package podstate

import (
	"errors"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"

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
	log     *slog.Logger
	resume  *supervise.Resume
	rec     *Recorder
	member  *Member
	pending chan uint64
}

// Open joins the state directory dir as container name. An empty dir
// returns a nil *Pod.
func Open(dir, name string, log *slog.Logger) (*Pod, error) {
	if dir == "" {
		return nil, nil
	}
	if err := CheckContainerName(name); err != nil {
		return nil, err
	}
	p := &Pod{log: log}
	// The document an earlier supervisor of this container left behind
	// (the kubelet restarted the container after a hand-over) carries the
	// container's back-off. Read it before it is replaced.
	if prev, err := readStatus(dir, name); err == nil && prev.LastExit != nil {
		p.resume = &supervise.Resume{BackoffRestarts: prev.BackoffRestarts, LastStart: prev.StartedAt, LastExit: prev.LastExit.At}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("cannot read the container's previous status document; its back-off starts over", "err", err)
	}
	rec, err := NewRecorder(dir, Status{
		Container: name, State: supervise.Running,
		SupervisorPID: os.Getpid(), SupervisorVersion: contract.Version,
	}, func(err error) { log.Warn("cannot write the status document", "err", err) })
	if err != nil {
		return nil, err
	}
	p.rec = rec
	m, err := Join(dir, name, WatchOptions{})
	if err != nil {
		// The status document still works; pod restarts do not.
		log.Warn("cannot watch for pod restarts; RestartAllContainers will restart this container only", "dir", dir, "err", err)
		return p, nil
	}
	p.member = m
	p.pending = make(chan uint64)
	go func() {
		for g := range m.Restarts() {
			p.pending <- g.N
		}
	}()
	return p, nil
}

// Resume returns the back-off an earlier supervisor of this container left,
// nil when there is none.
func (p *Pod) Resume() *supervise.Resume {
	if p == nil {
		return nil
	}
	return p.resume
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

func (r restarter) Announce(exitCode int32) error {
	g, won, err := r.p.member.Announce(exitCode)
	if err == nil {
		r.p.log.Info("pod restart announced", "generation", g.N, "announcedHere", won)
	}
	return err
}

func (r restarter) Pending() <-chan uint64 { return r.p.pending }

func (r restarter) Accept(gen uint64) bool { return r.p.member.Accept(Generation{N: gen}) }

// Observe records a state change in the status document; the recorder
// writes it off the restart path.
func (p *Pod) Observe(st supervise.State) {
	if p == nil {
		return
	}
	var gen uint64
	if p.member != nil {
		gen = p.member.Generation()
	}
	p.rec.Update(func(s *Status) { s.fill(st, gen) })
}

// Close writes the final document, stops watching and returns the final
// status; on a nil *Pod it returns the status final describes.
func (p *Pod) Close(final supervise.State) Status {
	if p == nil {
		var s Status
		s.fill(final, 0)
		return s
	}
	p.Observe(final)
	if err := p.rec.Close(); err != nil {
		p.log.Warn("cannot write the final status document", "err", err)
	}
	if p.member != nil {
		p.member.Close()
	}
	return p.rec.Status()
}

func (s *Status) fill(st supervise.State, gen uint64) {
	s.State = st.Phase
	s.Restarts, s.PodRestarts, s.Generation = st.Restarts, st.PodRestarts, gen
	s.LastExit, s.LastRestart = exitOf(st.LastExit), exitOf(st.LastRestart)
	s.StartedAt, s.NextStartAt = st.StartedAt, st.NextStartAt
	s.BackoffRestarts = st.BackoffRestarts
}

func exitOf(e *supervise.Exit) *Exit {
	if e == nil {
		return nil
	}
	x := &Exit{Code: int32(e.Code), Action: e.Action, PodRestart: e.PodRestart, At: e.At}
	if e.Signal != 0 {
		x.Signal = unix.SignalName(e.Signal)
	}
	if e.Rule >= 0 {
		r := e.Rule
		x.Rule = &r
	}
	return x
}
