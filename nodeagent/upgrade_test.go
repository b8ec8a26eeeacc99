package nodeagent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/upgradefixture"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// TestScansEveryReleasesState: the node agent of this release reads the
// state volume a pod of every earlier release left (testdata/upgrade), in
// the kubelet's layout, and makes the same Events of it: an agent is
// upgraded while the pods on its node keep their older supervisors.
func TestScansEveryReleasesState(t *testing.T) {
	for _, release := range upgradefixture.Releases(t) {
		t.Run(release, func(t *testing.T) {
			pods := t.TempDir()
			volume := filepath.Join(pods, "uid-1", "volumes", "kubernetes.io~empty-dir", contract.StateVolume)
			if err := os.MkdirAll(volume, 0o777); err != nil {
				t.Fatal(err)
			}
			upgradefixture.CopyStateTo(t, release, volume)
			docs, errs := Scan(pods, Limits{})
			if len(errs) > 0 {
				t.Fatalf("scan: %v", errs)
			}
			byName := map[string]Doc{}
			for _, d := range docs {
				byName[d.Container] = d
			}
			tr, ok := byName["trainer"]
			if len(docs) != 3 || !ok || tr.PodUID != "uid-1" {
				t.Fatalf("scanned %d documents %v, want trainer, worker and helper of uid-1", len(docs), docs)
			}
			if tr.RestartsTotal == nil || *tr.RestartsTotal != 3 {
				t.Errorf("trainer's restartsTotal read as %v, want 3", tr.RestartsTotal)
			}
			r := agentapi.RestartOf(tr.Status, *tr.RestartsTotal)
			if r.ExitCode == nil || *r.ExitCode != 42 || r.Rule == nil || *r.Rule != 0 || r.Action != "Restart" || r.Total != 3 {
				t.Errorf("trainer's restart read as %+v", r)
			}
			if tr.HandOver == nil {
				t.Fatal("trainer's hand-over was not read")
			}
			if h := agentapi.HandOverOf(tr.Status, 3); h.Reason != "RestartBudgetExhausted" || h.ExitCode != 1 {
				t.Errorf("trainer's hand-over read as %+v", h)
			}
			if w := byName["worker"]; w.Generation != 1 || w.PodRestarts != 1 || w.State != "running" {
				t.Errorf("worker read as %+v", w)
			}
		})
	}
}
