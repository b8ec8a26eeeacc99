package apiserver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// standIns answer group rounds for the scale harness where the machine
// cannot hold a real supervisor per simulated pod (each runs a shell and
// its children for its workload; 512 of them, when they still polled
// their pods' markers every 20 ms through a round, kept 2 cores at a load
// of 540). Each stand-in is one container of one
// pod, and does through the same statevol calls, on the same files, what
// the supervisor does with a workload that stops at once: on a new pod
// generation it marks its stop and, past the pod's barrier (one container:
// at once), the pod's stop for the group; once the node agent released
// the round it logs a start and marks it. Its requests are the
// supervisor's (statevol.RequestGroup). One inotify instance watches every
// stand-in's pod-restarts/; nothing polls.
type standIns struct {
	w     *fsnotify.Watcher
	mu    sync.Mutex
	byDir map[string]*standIn // pod-restarts/ of each
	list  []*standIn
}

type standIn struct {
	state, log       string
	handled, waiting uint64
}

func startStandIns(t *testing.T) *standIns {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	must(t, err)
	s := &standIns{w: w, byDir: map[string]*standIn{}}
	t.Cleanup(func() { w.Close() })
	go func() {
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				s.mu.Lock()
				m := s.byDir[filepath.Dir(ev.Name)]
				if m != nil {
					m.step()
				}
				s.mu.Unlock()
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return s
}

// add starts a stand-in on the state volume state, logging its runs'
// starts to log as the harness's script does.
func (s *standIns) add(t *testing.T, state, log string) {
	t.Helper()
	dir := filepath.Join(state, contract.PodRestartsDir)
	must(t, os.MkdirAll(dir, 0o755))
	m := &standIn{state: state, log: log}
	s.mu.Lock()
	s.byDir[dir] = m
	s.list = append(s.list, m)
	s.mu.Unlock()
	must(t, s.w.Add(dir))
	m.logLine("start")
}

// exit makes stand-in i's run end with exit code 42 under its
// RestartGroup rule, as the supervisor does: it asks for the group's next
// generation.
func (s *standIns) exit(t *testing.T, i, round int) {
	t.Helper()
	s.mu.Lock()
	m := s.list[i]
	s.mu.Unlock()
	m.logLine("exit")
	must(t, statevol.RequestGroup(m.state, statevol.GroupRequest{ID: fmt.Sprintf("round-%d", round), Container: "rank", ExitCode: 42,
		Observed: statevol.LastGroup(m.state), Time: time.Now()}))
}

// step moves the stand-in on from what its pod-restarts/ holds.
func (m *standIn) step() {
	if cur, err := statevol.Current(m.state); err == nil && m.waiting == 0 && cur > m.handled {
		m.waiting = cur
		_ = statevol.Mark(m.state, cur, statevol.MarkStopped, "rank", nil)
		_ = statevol.Mark(m.state, cur, statevol.MarkGrouped, "rank", nil)
	}
	if m.waiting > 0 && statevol.GroupReleased(m.state, m.waiting) {
		m.logLine("start")
		_ = statevol.Mark(m.state, m.waiting, statevol.MarkStarted, "rank", nil)
		m.handled, m.waiting = m.waiting, 0
	}
}

func (m *standIn) logLine(what string) {
	f, err := os.OpenFile(m.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fmt.Fprintf(f, "%s %d\n", what, time.Now().UnixNano())
	f.Close()
}
