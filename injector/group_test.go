package injector

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func groupRulesPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rank-0", Annotations: map[string]string{contract.AnnotationRules: `{"trainer": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [42]}}]}}`}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{
			{Name: "trainer", Image: "x", Command: []string{"train"}},
			{Name: "logs", Image: "x", Command: []string{"ship"}},
		}}}
}

// RestartGroup in the annotation wraps every container, as
// RestartAllContainers does (the group's round restarts them all), and
// lists them as the pod's members; the config keeps the action.
func TestRestartGroupWrapsEveryContainer(t *testing.T) {
	res, err := New(Options{}).MutatePod(context.Background(), groupRulesPod())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Containers, ",") != "trainer,logs" {
		t.Fatalf("wrapped %v, want every container", res.Containers)
	}
	var cfg, members string
	for _, e := range res.Pod.Spec.Containers[0].Env {
		switch e.Name {
		case contract.EnvConfig:
			cfg = e.Value
		case contract.EnvPodMembers:
			members = e.Name
			if e.ValueFrom == nil && e.Value == "" {
				t.Error("empty member list")
			}
		}
	}
	if !strings.Contains(cfg, `"action":"RestartGroup"`) || members == "" {
		t.Fatalf("config %s, members %q", cfg, members)
	}
	plans, _, err := Explain(groupRulesPod(), "spec", `Pod "rank-0"`, rules.NewestKube)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, o := range plans[0].Outcomes {
		if o.Codes == "42" {
			found = true
			if !strings.Contains(o.Supervised, "group") || !strings.Contains(o.Native, "no native equivalent") {
				t.Errorf("explain 42: %+v", o)
			}
		}
	}
	if !found {
		t.Fatalf("explain has no outcome for 42: %+v", plans[0].Outcomes)
	}
}

// The container fields cannot say RestartGroup: the API server refuses it
// there, and the error says where it goes.
func TestRestartGroupRefusedInTheFields(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	pod := groupRulesPod()
	pod.Annotations = nil
	pod.Spec.Containers[0].RestartPolicy = &never
	pod.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: "RestartGroup",
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	_, err := New(Options{}).MutatePod(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "spec.containers[0].restartPolicyRules[0].action") || !strings.Contains(err.Error(), contract.AnnotationRules) {
		t.Fatalf("err = %v", err)
	}
}

const groupJobSet = `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: t}
spec:
  failurePolicy: FAILUREPOLICY
  replicatedJobs:
  - name: w
    template:
      spec:
        template:
          metadata:
            annotations:
              restart-supervisor.dev/rules: '{"trainer": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [42]}}]}}'
              EXTRA
          spec:
            restartPolicy: Never
            containers:
            - name: trainer
              image: t:1
              command: [python3, train.py]
`

// A JobSet's explicit failurePolicy.maxRestarts, the recreations of the
// whole JobSet it allows, limits the group restarts that stand in for
// them: inject puts it into the template's group-max-restarts annotation
// unless the user set one, and explain says so. Without maxRestarts there
// is no limit.
func TestJobSetMaxRestartsLimitsGroupRestarts(t *testing.T) {
	for _, c := range []struct{ policy, extra, want, explain string }{
		{"{maxRestarts: 3}", "", "3", "group limit: 3 group restarts (spec.failurePolicy.maxRestarts)"},
		{"{maxRestarts: 3, restartStrategy: InPlaceRestart}", "", "3", "group limit: 3 group restarts (spec.failurePolicy.maxRestarts)"},
		{"{maxRestarts: 3}", `restart-supervisor.dev/group-max-restarts: "7"`, "7", "group limit: 7 group restarts (annotation restart-supervisor.dev/group-max-restarts)"},
		{"{}", "", "", ""},
	} {
		doc := strings.NewReplacer("FAILUREPOLICY", c.policy, "EXTRA", c.extra).Replace(groupJobSet)
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		res, err := New(Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: obj})
		if err != nil {
			t.Fatalf("%s: %v", c.policy, err)
		}
		jobs, _, _ := unstructured.NestedSlice(res.Object.Object, "spec", "replicatedJobs")
		anns, _, _ := unstructured.NestedStringMap(jobs[0].(map[string]any), "template", "spec", "template", "metadata", "annotations")
		if got := anns[contract.AnnotationGroupMaxRestarts]; got != c.want {
			t.Errorf("%s %s: %s = %q, want %q", c.policy, c.extra, contract.AnnotationGroupMaxRestarts, got, c.want)
		}
		plans, err := ExplainObject(obj, rules.NewestKube)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Join(plans[0].Containers[0].Limits, "\n")
		if c.explain != "" && !strings.Contains(lines, c.explain) || c.explain == "" && strings.Contains(lines, "group limit") {
			t.Errorf("%s %s: explain limits %q, want %q", c.policy, c.extra, lines, c.explain)
		}
	}
}
