//go:build training

package docker

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainingExample runs examples/training/docker.sh, the README's
// one-command try of a real PyTorch job under the supervisor with Docker,
// as a user runs it: without a fault, then with rank 1 exiting 42 and with
// rank 1 SIGKILLed at step 25. Every run must exit 0 with both ranks
// started twice in the faulted runs (once, and once in place, the
// container never replaced) and the unfaulted run's final loss.
func TestTrainingExample(t *testing.T) {
	need(t)
	script := filepath.Join(env.root, "examples", "training", "docker.sh")
	run := func(fault string) (starts [2]int, loss float64) {
		t.Helper()
		cmd := exec.Command(script)
		cmd.Env = append(os.Environ(), "FAULT_KIND="+fault)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("FAULT_KIND=%s %s: %v\n%s", fault, script, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			var line struct {
				Rank      int     `json:"rank"`
				Event     string  `json:"event"`
				FinalLoss float64 `json:"finalLoss"`
			}
			if json.Unmarshal([]byte(l), &line) != nil || line.Rank < 0 || line.Rank > 1 {
				continue
			}
			switch line.Event {
			case "start":
				starts[line.Rank]++
			case "done":
				if line.Rank == 0 {
					loss = line.FinalLoss
				}
			}
		}
		if loss == 0 {
			t.Fatalf("FAULT_KIND=%s: rank 0 printed no final loss:\n%s", fault, out)
		}
		t.Logf("FAULT_KIND=%s: starts per rank %v, final loss %v", fault, starts, loss)
		return starts, loss
	}
	starts, want := run("none")
	if starts != [2]int{1, 1} {
		t.Errorf("unfaulted run: starts per rank %v, want one each", starts)
	}
	for _, fault := range []string{"exit", "kill"} {
		starts, loss := run(fault)
		if starts != [2]int{2, 2} {
			t.Errorf("FAULT_KIND=%s: starts per rank %v, want two each (the second in place)", fault, starts)
		}
		if loss != want {
			t.Errorf("FAULT_KIND=%s: final loss %v, want the unfaulted run's %v", fault, loss, want)
		}
	}
}
