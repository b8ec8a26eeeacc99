//go:build training

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestTrainingReportKeepsOtherRows: a run of some paths (TRAINING_PATHS
// with -update-training) rewrites docs/training-<release>.md with their
// rows and keeps every other row, block and the whole run's line as they
// were; a later run of the same paths replaces its note and its rows.
func TestTrainingReportKeepsOtherRows(t *testing.T) {
	byID := map[string]trainingPath{}
	for _, p := range trainingPaths() {
		byID[p.id] = p
	}
	c := &cluster.Cluster{State: cluster.State{KubeVersion: "v1.37.2"}}
	run := func(seconds float64) []trainingRun {
		return []trainingRun{{rec: recoveryTime{seconds: seconds, stepsLost: 4}, pods: 2, state: "Complete"}}
	}
	// The whole report of two paths, as a run of every path writes it.
	exit, group, hang := byID["supervised"], byID["hang-group"], byID["hang-supervised"]
	whole := trainingReport(trainingResults{c: c, runs: 1, loadStart: "0.5", want: map[int]float64{2: 0.1},
		pace: map[int]stepStats{2: {median: 0.002, longest: 0.008}}, paths: []trainingPath{exit, group}, faults: trainingFaults(),
		results: map[string]map[string][]trainingRun{
			exit.id:  {"rank 1 exits 42 at step 25": run(1.8), "rank 1 is SIGKILLed at step 25": run(1.9)},
			group.id: {"rank 1 hangs at step 25": run(12), "none, under CPU load": {{steps: stepStats{1.5, 1.6}, firstBeat: 3, state: "Complete"}}},
		},
		shown: map[string]string{exit.id: "$ kubectl get pods -l a\nNAME exit\n", group.id: "$ kubectl get pods -l b\nNAME group\n"},
	})
	// A run of a third path rewrites the file.
	render := func(doc string, seconds float64) string {
		prior := parsePriorReport(doc)
		return trainingReport(trainingResults{c: c, runs: 1, loadStart: "0.5", want: map[int]float64{2: 0.1},
			paths: []trainingPath{hang}, faults: trainingFaults(), prior: &prior,
			results: map[string]map[string][]trainingRun{hang.id: {"rank 1 hangs at step 25": run(seconds)}},
			shown:   map[string]string{hang.id: "$ kubectl get pods -l c\n"},
		})
	}
	first := render(whole, 12.5)
	for _, l := range strings.Split(whole, "\n") {
		if strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "NAME ") || whenLine.MatchString(l) {
			if !strings.Contains(first, l+"\n") {
				t.Errorf("the merged report lost the line %q:\n%s", l, first)
			}
		}
	}
	row := "| " + hang.name + " | rank 1 hangs at step 25 | 1 | 12.50 s | 12.50 s | 4 | 1 of 1 | 2 | 0 | Complete |\n"
	if !strings.Contains(first, row) {
		t.Errorf("the merged report lacks the row %q:\n%s", row, first)
	}
	// In the paths' order: the new row after the first hang path's.
	if i, j := strings.Index(first, "| "+group.name+" | rank 1 hangs"), strings.Index(first, row); i < 0 || j < i {
		t.Errorf("the new row is not after the first path's:\n%s", first)
	}
	if strings.Count(first, priorNote+"`"+hang.id+"`") != 1 {
		t.Errorf("want one note of the run of %s:\n%s", hang.id, first)
	}
	second := render(first, 13)
	if strings.Contains(second, row) || strings.Count(second, priorNote) != 1 || strings.Count(second, "| "+hang.name+" |") != 1 {
		t.Errorf("a second run of the path kept its first row or note:\n%s", second)
	}
	if strings.Count(second, hang.scenario.title+", "+hang.name+":") != 1 {
		t.Errorf("want one block of the path:\n%s", second)
	}
	// A run of no hang path keeps the pace the hang rows were judged
	// against.
	prior := parsePriorReport(whole)
	other := trainingReport(trainingResults{c: c, runs: 1, loadStart: "0.5", want: map[int]float64{2: 0.1},
		pace: map[int]stepStats{2: {median: 0.004, longest: 0.009}}, paths: []trainingPath{exit}, faults: trainingFaults(), prior: &prior,
		results: map[string]map[string][]trainingRun{exit.id: {"rank 1 exits 42 at step 25": run(1.7), "rank 1 is SIGKILLed at step 25": run(1.7)}},
		shown:   map[string]string{exit.id: "$ kubectl get pods -l a\n"},
	})
	if want := paceNote(stepStats{median: 0.002, longest: 0.008}); prior.pace != want || !strings.Contains(other, want) {
		t.Errorf("a run of no hang path changed the hang section's pace %q:\n%s", want, other)
	}
	// A later run of one path of an earlier run's two takes it out of
	// that run's note.
	note := priorNote + "`hang-group`, `hang-supervised` (`TRAINING_PATHS`, `TRAINING_RUNS=5`): then."
	if got, want := withoutPaths(note, map[string]bool{"hang-supervised": true}), priorNote+"`hang-group` (`TRAINING_PATHS`, `TRAINING_RUNS=5`): then."; got != want {
		t.Errorf("withoutPaths: %q, want %q", got, want)
	}
	if got := withoutPaths(note, map[string]bool{"hang-supervised": true, "hang-group": true}); got != "" {
		t.Errorf("withoutPaths of every path: %q, want none", got)
	}
}

// TestTrainingIndexIsGenerated: docs/training.md is what the harness
// writes from docs/training-<release>.md and its recipe, so that an edit
// by hand, which the next -update-training would drop, is found first:
// such an edit belongs in trainingRecipe.
func TestTrainingIndexIsGenerated(t *testing.T) {
	docs := filepath.Join(repoRoot(t), "docs")
	want, err := trainingIndex(docs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(docs, "training.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("docs/training.md differs from what the harness writes at line %d:\n got %q\nwant %q", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("docs/training.md has %d lines, the harness writes %d", len(gl), len(wl))
	}
}
