package injector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

const budgetJobSet = `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: t}
spec:
  failurePolicy: {maxRestarts: MAX, restartStrategy: STRATEGY}
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          metadata: {annotations: ANNOTATIONS}
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: t:1
              command: [python3, train.py]
              restartPolicy: Never
              restartPolicyRules:
              - action: Restart
                exitCodes: {operator: In, values: [42]}
            - name: logger
              image: l:1
              command: [logger]
`

const budgetRayJob = `
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: r}
spec:
  entrypoint: python3 job.py
  submitterConfig: {backoffLimit: 2}
  submitterPodTemplate:
    spec:
      restartPolicy: SUBMITTERPOLICY
      containers:
      - name: submitter
        image: ray:1
        command: [ray, job, submit]
        restartPolicy: Never
        restartPolicyRules:
        - action: Restart
          exitCodes: {operator: In, values: [1]}
  rayClusterSpec:
    headGroupSpec:
      template:
        spec:
          containers:
          - name: head
            image: ray:1
            command: [ray, start]
            restartPolicy: Never
            restartPolicyRules:
            - action: Restart
              exitCodes: {operator: In, values: [1]}
`

// configs injects doc and returns each wrapped container's supervisor
// configuration, by container name.
func configs(t *testing.T, doc string) map[string]rules.Config {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	res, err := New(Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rules.Config{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if name, ok := x["name"].(string); ok {
				if env, ok := x["env"].([]any); ok {
					for _, e := range env {
						m, _ := e.(map[string]any)
						if m["name"] == contract.EnvConfig {
							var cfg rules.Config
							if err := json.Unmarshal([]byte(m["value"].(string)), &cfg); err != nil {
								t.Fatal(err)
							}
							out[name] = cfg
						}
					}
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(res.Object.Object)
	return out
}

// TestOwnerBudget: where the owner's controller counts restartCount, its
// limit becomes the restart budget of the ruled containers of its
// templates, unless the user gave one: a JobSet's failurePolicy.maxRestarts
// under restartStrategy InPlaceRestart, a RayJob's
// submitterConfig.backoffLimit for a submitter that restarts OnFailure. A
// container without rules, a template the field does not govern, a JobSet
// that recreates (its maxRestarts counts recreations: the conformance
// table's JobSet rows restart in place under maxRestarts 0) and a
// submitter whose pods restart Never get none.
func TestOwnerBudget(t *testing.T) {
	js := strings.NewReplacer("MAX", "3", "STRATEGY", "InPlaceRestart", "ANNOTATIONS", "{}").Replace(budgetJobSet)
	got := configs(t, js)
	if b := got["trainer"].RestartBudget; b == nil || b.Max() != 3 || b.Window != nil {
		t.Errorf("JobSet trainer: budget %+v, want maxRestarts 3 from failurePolicy.maxRestarts", b)
	}
	if c, ok := got["logger"]; ok && c.RestartBudget != nil {
		t.Errorf("JobSet logger (no rules): budget %+v, want none", c.RestartBudget)
	}

	for _, strategy := range []string{"Recreate", "''"} {
		doc := strings.NewReplacer("MAX", "0", "STRATEGY", strategy, "ANNOTATIONS", "{}").Replace(budgetJobSet)
		if b := configs(t, doc)["trainer"].RestartBudget; b != nil {
			t.Errorf("JobSet restartStrategy %s: budget %+v, want none (maxRestarts counts recreations)", strategy, b)
		}
	}

	own := strings.NewReplacer("MAX", "3", "STRATEGY", "InPlaceRestart", "ANNOTATIONS", `{"`+contract.AnnotationRules+`": '{"trainer":{"restartBudget":{"maxRestarts":7,"window":"1h"}}}'}`).Replace(budgetJobSet)
	if b := configs(t, own)["trainer"].RestartBudget; b == nil || b.Max() != 7 || b.WindowDuration().String() != "1h0m0s" {
		t.Errorf("JobSet trainer with its own budget: %+v, want the user's 7 within 1h", b)
	}

	got = configs(t, strings.ReplaceAll(budgetRayJob, "SUBMITTERPOLICY", "OnFailure"))
	if b := got["submitter"].RestartBudget; b == nil || b.Max() != 2 {
		t.Errorf("RayJob submitter OnFailure: budget %+v, want maxRestarts 2 from submitterConfig.backoffLimit", b)
	}
	if b := configs(t, strings.ReplaceAll(budgetRayJob, "SUBMITTERPOLICY", "Never"))["submitter"].RestartBudget; b != nil {
		t.Errorf("RayJob submitter Never: budget %+v, want none (the Job counts failed pods, not restarts)", b)
	}
	if b := got["head"].RestartBudget; b != nil {
		t.Errorf("RayJob head: budget %+v, want none (backoffLimit is the submitter's)", b)
	}

	for _, bad := range []string{"-1", "1.5", "x", "2147483648"} {
		doc := strings.NewReplacer("MAX", bad, "STRATEGY", "InPlaceRestart", "ANNOTATIONS", "{}").Replace(budgetJobSet)
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		_, err := New(Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: obj})
		if err == nil || !strings.Contains(err.Error(), "spec.failurePolicy.maxRestarts") || strings.Contains(err.Error(), "\n") {
			t.Errorf("maxRestarts %s: error %v, want one line naming spec.failurePolicy.maxRestarts", bad, err)
		}
	}
}

// TestExplainNamesTheOwnersBudget: explain says where a budget came from.
func TestExplainNamesTheOwnersBudget(t *testing.T) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(strings.NewReplacer("MAX", "3", "STRATEGY", "InPlaceRestart", "ANNOTATIONS", "{}").Replace(budgetJobSet)), &obj); err != nil {
		t.Fatal(err)
	}
	plans, err := ExplainObject(obj, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range plans {
		for _, c := range p.Containers {
			lines = append(lines, c.Limits...)
		}
	}
	want := "restart budget: at most 3 in-place restarts in the pod's life (not reset by the kubelet's restarts); then the exit is handed to the kubelet (pod restartPolicy Never) (from the owner's spec.failurePolicy.maxRestarts)"
	if len(lines) != 1 || lines[0] != want {
		t.Errorf("limits %q, want [%q]", lines, want)
	}
}
