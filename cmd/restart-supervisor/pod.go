package main

import (
	"log/slog"
	"os"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/podstate"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// pod connects the supervisor to the pod's shared state directory: the
// container's status document and pod-wide restarts (RestartAllContainers).
type pod struct {
	log     *slog.Logger
	rec     *podstate.Recorder
	member  *podstate.Member
	pending chan uint64
}

// joinPod opens the state directory. Without one (outside a wrapped pod)
// it returns nil: no status document, and RestartAllContainers restarts
// only this container.
func joinPod(dir, name string, log *slog.Logger) (*pod, error) {
	if dir == "" {
		return nil, nil
	}
	if err := podstate.CheckContainerName(name); err != nil {
		return nil, err
	}
	p := &pod{log: log}
	rec, err := podstate.NewRecorder(dir, podstate.Status{
		Container: name, State: podstate.StateRunning,
		SupervisorPID: os.Getpid(), SupervisorVersion: contract.Version,
	}, func(err error) { log.Warn("cannot write the status document", "err", err) })
	if err != nil {
		return nil, err
	}
	p.rec = rec
	m, err := podstate.Join(dir, name, podstate.WatchOptions{})
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

// restarter is the supervise.PodRestarter, nil without pod restarts.
func (p *pod) restarter() supervise.PodRestarter {
	if p == nil || p.member == nil {
		return nil
	}
	return p
}

func (p *pod) Announce(exitCode int32) error {
	g, won, err := p.member.Announce(exitCode)
	if err == nil {
		p.log.Info("pod restart announced", "generation", g.N, "announcedHere", won)
	}
	return err
}

func (p *pod) Pending() <-chan uint64 { return p.pending }

func (p *pod) Accept(gen uint64) bool { return p.member.Accept(podstate.Generation{N: gen}) }

// update records a state change in the status document; the recorder
// writes it off the restart path.
func (p *pod) update(st supervise.State) {
	if p == nil {
		return
	}
	var gen uint64
	if p.member != nil {
		gen = p.member.Generation()
	}
	p.rec.Update(func(s *podstate.Status) { fillStatus(s, st, gen) })
}

// close writes the final document and returns it.
func (p *pod) close(final supervise.State) podstate.Status {
	if p == nil {
		var s podstate.Status
		fillStatus(&s, final, 0)
		return s
	}
	p.update(final)
	if err := p.rec.Close(); err != nil {
		p.log.Warn("cannot write the final status document", "err", err)
	}
	if p.member != nil {
		p.member.Close()
	}
	return p.rec.Status()
}

func fillStatus(s *podstate.Status, st supervise.State, gen uint64) {
	s.State = map[supervise.Phase]podstate.State{
		supervise.Running: podstate.StateRunning, supervise.BackingOff: podstate.StateBackoff,
		supervise.Holding: podstate.StateHeld, supervise.Stopping: podstate.StateStopping,
		supervise.Exited: podstate.StateExited,
	}[st.Phase]
	s.Restarts, s.PodRestarts, s.Generation = st.Restarts, st.PodRestarts, gen
	s.LastExit, s.LastRestart = podExit(st.LastExit), podExit(st.LastRestart)
	s.StartedAt, s.NextStartAt = st.StartedAt, st.NextStartAt
}

func podExit(e *supervise.Exit) *podstate.Exit {
	if e == nil {
		return nil
	}
	x := &podstate.Exit{Code: int32(e.Code), Action: e.Action, PodRestart: e.PodRestart, At: e.At}
	if e.Signal != 0 {
		x.Signal = signalName(e.Signal)
	}
	if e.Rule >= 0 {
		r := e.Rule
		x.Rule = &r
	}
	return x
}
