package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainingRecipes runs docs/training.md's recipes
// (examples/training/recipes) through the real binary, as a user would
// before applying them: `inject` must wrap each trainer with its rules and
// its watchdog in the supervisor's config, and `explain` must show the
// rule on the retriable codes, the watchdog's stall judged as 124, and
// the pod policy the controller will set.
func TestTrainingRecipes(t *testing.T) {
	bin := injectorBinary(t)
	for _, tc := range []struct {
		file     string
		injected string // inject's summary line
		explain  []string
	}{
		{"job.yaml", `Job "trainer" injected (trainer)`, []string{
			"rule 0: Restart In [1 42 124]", "watchdog: heartbeat a change of /ckpt/heartbeat", "restart budget: at most 5"}},
		{"jobset.yaml", `JobSet "trainer" injected (trainer)`, []string{
			"rule 0: RestartGroup In [1 42 124]", `watchdog: heartbeat an output line matching "\"step\": [0-9]+"`, "group limit: 10"}},
		{"pytorchjob.yaml", `PyTorchJob "trainer" injected`, []string{
			"pod restartPolicy Never (the PyTorchJob controller sets it from spec.pytorchReplicaSpecs.Master.restartPolicy)",
			"pod restartPolicy Never (the PyTorchJob controller sets it from spec.pytorchReplicaSpecs.Worker.restartPolicy)",
			"rule 0: RestartGroup In [1 42 124]", "watchdog: heartbeat an output line"}},
		{"trainjob.yaml", `TrainingRuntime "torch-in-place" injected (node)`, []string{
			"rule 0: RestartGroup In [1 124]", "watchdog: heartbeat an output line"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f := filepath.Join("..", "..", "examples", "training", "recipes", tc.file)
			cmd := exec.Command(bin, "inject", "--no-lookup", "-f", f)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil || !strings.Contains(stderr.String(), tc.injected) {
				t.Fatalf("inject: %v; stderr %q, want %q", err, stderr.String(), tc.injected)
			}
			if !strings.Contains(string(out), `\"watchdog\":{`) && !strings.Contains(string(out), `"watchdog":{`) {
				t.Errorf("the injected manifest carries no watchdog in the supervisor's config:\n%s", out)
			}
			ex, err := exec.Command(bin, "explain", "-f", f).CombinedOutput()
			if err != nil {
				t.Fatalf("explain: %v\n%s", err, ex)
			}
			for _, want := range append(tc.explain, "judged as exit code 124, reason Stalled") {
				if !strings.Contains(string(ex), want) {
					t.Errorf("explain lacks %q:\n%s", want, ex)
				}
			}
		})
	}
}
