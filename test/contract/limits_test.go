package contract_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// TestInjectedRestartBudget injects the golden pod-native.yaml (Restart on
// exit 42 or 43) with a restart budget of 2 in the rules annotation, and
// runs the wrapped container as the injector wrote it, twice, as the
// kubelet would after a hand-over. The workload always exits 42: the first
// supervisor restarts it twice in place and hands the third exit over
// (exit 42, reason RestartBudgetExhausted in the state volume's status
// document); the second, with the same volume, hands its first exit over
// at once: the budget is the container's, not the supervisor process's.
func TestInjectedRestartBudget(t *testing.T) {
	supervisor := build(t, t.TempDir(), "github.com/restart-supervisor/restart-supervisor/cmd/restart-supervisor", "")
	pod := goldenPod(t, "pod-native.yaml")
	const name = "trainer"
	work := t.TempDir()
	findContainer(t, pod.Spec.Containers, name).Command = []string{"sh", "-c", `echo run >> ` + work + `/runs; exit 42`}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[contract.AnnotationRules] = `{"trainer": {"restartBudget": {"maxRestarts": 2}}}`

	res, err := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:contract"}).
		MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Pod
	n := newNode(t, out, supervisor)
	argv, env, _ := n.process(findContainer(t, out.Spec.InitContainers, contract.InstallContainer))
	if code, log := run(t, argv, env); code != 0 {
		t.Fatalf("install container exited %d:\n%s", code, log)
	}
	c := findContainer(t, out.Spec.Containers, name)
	argv, env, mounts := n.process(c)
	state := hostPath(mounts, envValue(t, c, contract.EnvStateDir))

	for i, wantRuns := range []int{3, 4} {
		code, log := run(t, argv, env)
		if code != 42 {
			t.Fatalf("supervisor %d exited %d, want 42:\n%s", i+1, code, log)
		}
		if !strings.Contains(log, "reason=RestartBudgetExhausted") {
			t.Errorf("supervisor %d: no hand-over reason in the log:\n%s", i+1, log)
		}
		b, _ := os.ReadFile(filepath.Join(work, "runs"))
		if got := strings.Count(string(b), "run"); got != wantRuns {
			t.Errorf("after supervisor %d: %d runs, want %d", i+1, got, wantRuns)
		}
		var doc struct {
			HandOver struct{ Reason string } `json:"handOver"`
			Limits   struct {
				BudgetRestarts int `json:"budgetRestarts"`
			} `json:"limits"`
		}
		b, err := os.ReadFile(filepath.Join(state, contract.StatusDir, name+contract.StatusExt))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.HandOver.Reason != "RestartBudgetExhausted" || doc.Limits.BudgetRestarts != 2 {
			t.Errorf("supervisor %d: status document %s", i+1, b)
		}
	}
}
