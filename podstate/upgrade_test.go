package podstate

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/upgradefixture"
	"github.com/restart-supervisor/restart-supervisor/statevol"
	"github.com/restart-supervisor/restart-supervisor/supervise"
)

var writeUpgradeFixture = flag.Bool("write-upgrade-fixture", false,
	"write testdata/upgrade/<contract.Version>/state with this release's writers (refused if it exists)")

// fixtureTime is the clock of the fixture's documents: fixed, so that a
// second writing of the same release gives the same bytes.
var fixtureTime = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

// TestWriteUpgradeFixture writes, with this release's own writers, the
// state volume a pod of this release leaves for the next one: only with
// -write-upgrade-fixture, and never over an existing release's fixture
// (docs/upgrading.md). The documents are those the readers' test below
// expects of every release's fixture.
func TestWriteUpgradeFixture(t *testing.T) {
	if !*writeUpgradeFixture {
		t.Skip("writes a fixture only with -write-upgrade-fixture")
	}
	dir := filepath.Join(upgradefixture.Root(t), contract.Version, "state")
	if _, err := os.Stat(filepath.Dir(dir)); err == nil {
		t.Fatalf("%s exists: a release's fixture is never rewritten; a format change comes with a new version", filepath.Dir(dir))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rule0 := 0
	docs := []statevol.Status{{
		// Handed over by its restart budget after in-place restarts.
		Container: "trainer", State: contract.PhaseExited, Restarts: 2, RestartsTotal: 3, BackoffRestarts: 2,
		LastExit:    &statevol.Exit{Code: 1, At: fixtureTime},
		LastRestart: &statevol.Exit{Code: 42, Rule: &rule0, Action: "Restart", At: fixtureTime.Add(-time.Minute)},
		StartedAt:   fixtureTime.Add(-30 * time.Second),
		Limits: &statevol.Limits{BudgetRestarts: 2, BudgetRecent: []time.Time{fixtureTime.Add(-2 * time.Minute), fixtureTime.Add(-time.Minute)},
			ProgressDigest: "absent", StalledRestarts: 1},
		HandOver:  &statevol.HandOver{Reason: "RestartBudgetExhausted", Message: "2 in-place restarts within 1h0m0s"},
		UpdatedAt: fixtureTime, SupervisorPID: 1, SupervisorVersion: contract.Version,
	}, {
		// Running in the pod restart generation 1, which it announced.
		Container: "worker", State: contract.PhaseRunning, Restarts: 1, RestartsTotal: 1, PodRestarts: 1, Generation: 1,
		Announced: 1, Started: true,
		LastExit:    &statevol.Exit{Code: 42, Rule: &rule0, Action: "RestartAllContainers", At: fixtureTime.Add(-10 * time.Second)},
		LastRestart: &statevol.Exit{Code: 42, Rule: &rule0, Action: "RestartAllContainers", At: fixtureTime.Add(-10 * time.Second)},
		StartedAt:   fixtureTime.Add(-9 * time.Second),
		UpdatedAt:   fixtureTime, SupervisorPID: 1, SupervisorVersion: contract.Version,
	}, {
		// Waiting out a back-off after an exit the pod restart's stop gave.
		Container: "helper", State: contract.PhaseBackingOff, Restarts: 1, RestartsTotal: 1, PodRestarts: 1, Generation: 1,
		BackoffRestarts: 1,
		LastExit:        &statevol.Exit{Code: 137, Signal: "SIGKILL", PodRestart: 1, Stopped: true, At: fixtureTime.Add(-10 * time.Second)},
		NextStartAt:     fixtureTime.Add(5 * time.Second),
		UpdatedAt:       fixtureTime, SupervisorPID: 1, SupervisorVersion: contract.Version,
	}}
	for _, d := range docs {
		if err := statevol.WriteStatus(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, won, err := statevol.AnnounceWith(dir, 0, "worker", 42, nil); err != nil || !won {
		t.Fatalf("statevol.AnnounceWith: won=%v, %v", won, err)
	}
	// The generation's time is the writer's clock: fix it, so the bytes
	// are the same on every writing.
	g := statevol.ReadGeneration(dir, 1)
	g.Time = fixtureTime.Add(-10 * time.Second)
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, contract.PodRestartsDir, statevol.GenName(1)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The environment and command lines this release's injector gives a
	// wrapped container: its own goldens, which the supervisor's test
	// reads back (cmd/restart-supervisor TestReadsEveryReleasesEnvironment).
	injected := filepath.Join(filepath.Dir(dir), "injected")
	if err := os.Mkdir(injected, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, golden := range []string{"pod.json", "restart-all.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "injector", "testdata", "out", golden))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(injected, golden), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %s; add its files to testdata/upgrade/SHA256SUMS (go test ./internal/upgradefixture -update-sums)", dir)
}

// TestReadsEveryReleasesState: the state volume of every release in
// testdata/upgrade, read by this release's podstate as the next
// supervisor, the node agent and `restart-supervisor status` read it.
func TestReadsEveryReleasesState(t *testing.T) {
	for _, release := range upgradefixture.Releases(t) {
		t.Run(release, func(t *testing.T) {
			dir := upgradefixture.CopyState(t, release)
			docs, err := statevol.ReadAll(dir)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]statevol.Status{}
			for _, d := range docs {
				byName[d.Container] = d
			}
			if len(byName) != 3 {
				t.Fatalf("read %d documents %v, want trainer, worker and helper", len(docs), docs)
			}
			tr, w, h := byName["trainer"], byName["worker"], byName["helper"]
			if tr.State != "exited" || tr.RestartsTotal != 3 || tr.LastExit == nil || tr.LastExit.Code != 1 ||
				tr.LastRestart == nil || tr.LastRestart.Code != 42 || tr.LastRestart.Rule == nil || *tr.LastRestart.Rule != 0 ||
				tr.HandOver == nil || tr.HandOver.Reason != "RestartBudgetExhausted" ||
				tr.Limits == nil || tr.Limits.BudgetRestarts != 2 || len(tr.Limits.BudgetRecent) != 2 {
				t.Errorf("trainer read as %+v", tr)
			}
			if w.State != "running" || w.Generation != 1 || w.Announced != 1 || !w.Started || w.PodRestarts != 1 {
				t.Errorf("worker read as %+v", w)
			}
			if h.State != "backoff" || h.LastExit == nil || h.LastExit.PodRestart != 1 || !h.LastExit.Stopped || h.NextStartAt.IsZero() {
				t.Errorf("helper read as %+v", h)
			}
			if n, err := statevol.Current(dir); err != nil || n != 1 {
				t.Errorf("current generation %d, %v; want 1", n, err)
			}
			if g := statevol.ReadGeneration(dir, 1); g.Source != "worker" || g.ExitCode != 42 {
				t.Errorf("generation 1 read as %+v", g)
			}

			// The next supervisor of trainer goes on from its document:
			// the back-off step, the exit handed over, the budget.
			p, err := Open(dir, "trainer", nil)
			if err != nil {
				t.Fatal(err)
			}
			r := p.Resume()
			if r == nil || r.BackoffRestarts != 2 || r.LastExit.IsZero() {
				t.Errorf("trainer resumed as %+v", r)
			}
			if l := p.Limits(); l == nil || l.BudgetRestarts != 2 || len(l.BudgetRecent) != 2 {
				t.Errorf("trainer's limits resumed as %+v", l)
			}
			if final := p.Close(supervise.State{}); final.RestartsTotal < 3 {
				t.Errorf("trainer's restartsTotal went down: %d, the document said 3", final.RestartsTotal)
			}
		})
	}
}
