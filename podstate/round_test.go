package podstate

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

// Round markers are no generations, and they are pruned with theirs.
func TestRoundMarkersArePrunedWithTheirGeneration(t *testing.T) {
	dir := t.TempDir()
	m, err := Join(dir, "a", WatchOptions{ForcePoll: true, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for i := 0; i < 12; i++ {
		g, won, err := m.Announce(88)
		if err != nil || !won {
			t.Fatalf("statevol.AnnounceWith %d: %v %v", i, won, err)
		}
		_, cancel := m.Stopped(g.N)
		cancel()
		m.Started(g.N)
		if cur, _ := statevol.Current(dir); cur != g.N {
			t.Fatalf("current generation %d after markers of %d", cur, g.N)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, contract.PodRestartsDir))
	for _, e := range entries {
		n, ok := statevol.ParseGenName(e.Name())
		if !ok {
			n, _, _, ok = statevol.ParseMarker(e.Name())
		}
		if !ok {
			if e.Name()[0] != '.' {
				t.Errorf("unexpected file %s", e.Name())
			}
			continue
		}
		if n+statevol.GenKeep < 12 {
			t.Errorf("%s not pruned", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, contract.PodRestartsDir, statevol.MarkerName(12, statevol.MarkStopped, "a"))); err != nil {
		t.Errorf("newest stopped marker: %v", err)
	}
}

// TestRoundWaitsForInitRerun: a member after an init container's re-run
// waits for it past the sidecars' bound, for as long as the re-run takes,
// and stops waiting when the re-run fails, which InitFailed then reports
// with the code the re-run's failed marker holds, before its status document says it.
func TestRoundWaitsForInitRerun(t *testing.T) {
	for _, outcome := range []string{"started", "failed"} {
		t.Run(outcome, func(t *testing.T) {
			dir := t.TempDir()
			members := []contract.PodMember{{Name: "s", Kind: contract.MemberSidecar}, {Name: "fetch-rerun", Kind: contract.MemberInit}, {Name: "c", Kind: contract.MemberRegular}}
			recs := map[string]*Recorder{}
			join := func(name string) *Member {
				m, err := Join(dir, name, WatchOptions{ForcePoll: true, PollInterval: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				m.SetRound(members, nil, nil)
				rec, err := NewRecorder(dir, statevol.Status{Container: name, State: contract.PhaseRunning}, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rec.Close() })
				if err := rec.Sync(func(*statevol.Status) {}); err != nil { // written before any round
					t.Fatal(err)
				}
				recs[name] = rec
				return m
			}
			s, fetch, c := join("s"), join("fetch-rerun"), join("c")
			const n = 1
			for _, m := range []*Member{s, fetch} {
				_, cancel := m.Stopped(n)
				t.Cleanup(cancel)
			}
			ready, cancel := c.Stopped(n)
			t.Cleanup(cancel)
			s.Started(n) // the sidecar is up; the re-run is still running
			select {
			case <-ready:
				t.Fatal("c may start before the init container's re-run ended")
			case <-time.After(SidecarWait + time.Second):
			}
			if _, failed := c.InitFailed(n); failed {
				t.Fatal("InitFailed before any failure")
			}
			if outcome == "started" {
				fetch.Started(n)
			} else {
				// The re-run's status document, written off the restart
				// path, still says running: the code comes with the
				// marker (TestInitRerunRound once read the old document
				// and ended with 1).
				fetch.Failed(n, 3)
			}
			select {
			case <-ready:
			case <-time.After(5 * time.Second):
				t.Fatalf("c still waiting after the re-run %s", outcome)
			}
			code, failed := c.InitFailed(n)
			if want := outcome == "failed"; failed != want || (want && code != 3) {
				t.Fatalf("InitFailed = %d, %v; want failed %v with code 3", code, failed, want)
			}
			if _, failed := s.InitFailed(n); failed {
				t.Fatal("a sidecar before the re-run is told it failed")
			}
		})
	}
}

// TestInitRerunJoiningMidRoundCountsAsStarted: a re-run sidecar whose
// supervisor starts while a pod restart is under way (restarted by the
// kubelet after its supervisor died) takes that round as done, so the
// members after it do not wait for it for ever.
func TestInitRerunJoiningMidRoundCountsAsStarted(t *testing.T) {
	dir := t.TempDir()
	a, err := Join(dir, "a", WatchOptions{ForcePoll: true, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, _, err := a.Announce(88)
	if err != nil {
		t.Fatal(err)
	}
	members := []contract.PodMember{{Name: "fetch-rerun", Kind: contract.MemberInit}, {Name: "a", Kind: contract.MemberRegular}}
	p, err := OpenMember(dir, "fetch-rerun", members, WatchOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(supervise.State{Phase: contract.PhaseExited})
	if a.markers(g.N)[statevol.MarkStarted]["fetch-rerun"] == 0 {
		t.Fatalf("no started marker of fetch-rerun for generation %d", g.N)
	}
}
