package cluster

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

func restartRule(action corev1.ContainerRestartRuleAction, codes ...int32) corev1.ContainerRestartRule {
	return corev1.ContainerRestartRule{Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
		Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: codes}}
}

// carrierPod has a sidecar with rules, an init container with a policy and
// rules, a regular container with both, one with a policy only and one
// with nothing.
func carrierPod() *corev1.Pod {
	always, never := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{
				{Name: "s", RestartPolicy: &always, RestartPolicyRules: []corev1.ContainerRestartRule{
					restartRule(corev1.ContainerRestartRuleActionRestartAllContainers, 42)}},
				{Name: "init", RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{
					restartRule(corev1.ContainerRestartRuleActionRestartAllContainers, 42)}},
			},
			Containers: []corev1.Container{
				{Name: "a", RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{
					restartRule(corev1.ContainerRestartRuleActionRestart, 42, 43)}},
				{Name: "b", RestartPolicy: &always},
				{Name: "c"},
			},
		},
	}
}

// The injector reads the same rules from the annotation as from the fields,
// and only what a release before 1.34 knows stays on the containers.
func TestRulesToAnnotation(t *testing.T) {
	pod := carrierPod()
	want, err := injector.PodRules(pod, "spec", "pod p")
	if err != nil {
		t.Fatal(err)
	}
	moved := pod.DeepCopy()
	if err := RulesToAnnotation(&moved.ObjectMeta, &moved.Spec); err != nil {
		t.Fatal(err)
	}
	for _, c := range append(append([]corev1.Container{}, moved.Spec.InitContainers...), moved.Spec.Containers...) {
		if len(c.RestartPolicyRules) > 0 {
			t.Errorf("container %s keeps restartPolicyRules %v", c.Name, c.RestartPolicyRules)
		}
		if c.RestartPolicy != nil && c.Name != "s" {
			t.Errorf("container %s keeps restartPolicy %s", c.Name, *c.RestartPolicy)
		}
	}
	if p := moved.Spec.InitContainers[0].RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
		t.Errorf("sidecar s lost its restartPolicy Always: %v", p)
	}
	got, err := injector.PodRules(moved, "spec", "pod p")
	if err != nil {
		t.Fatalf("the injector refuses the annotation %s: %v", moved.Annotations[contract.AnnotationRules], err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d containers read from the annotation, %d from the fields", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Rules, want[i].Rules) || got[i].Kind != want[i].Kind || got[i].Ruled != want[i].Ruled {
			t.Errorf("container %s: from the annotation %+v (kind %v, ruled %v), from the fields %+v (kind %v, ruled %v)",
				want[i].Name, got[i].Rules, got[i].Kind, got[i].Ruled, want[i].Rules, want[i].Kind, want[i].Ruled)
		}
	}

	// Moving again changes nothing: the annotation already says it.
	again := moved.DeepCopy()
	if err := RulesToAnnotation(&again.ObjectMeta, &again.Spec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, moved) {
		t.Errorf("a second move changed the pod:\n%v\n%v", again.Annotations, moved.Annotations)
	}
}

// An annotation that already carries a container's rules is kept when the
// fields agree (a Job scenario writes both) and refused when they do not.
func TestRulesToAnnotationExisting(t *testing.T) {
	pod := carrierPod()
	pod.Spec.InitContainers = nil
	pod.Annotations = map[string]string{contract.AnnotationRules: `{"a":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42,43]}}]}}`}
	if err := RulesToAnnotation(&pod.ObjectMeta, &pod.Spec); err != nil {
		t.Fatalf("agreeing annotation: %v", err)
	}
	if _, err := injector.PodRules(pod, "spec", "pod p"); err != nil {
		t.Fatal(err)
	}

	// An entry's limits, which no field holds, stay beside the moved rules.
	pod = carrierPod()
	pod.Spec.InitContainers = nil
	pod.Annotations = map[string]string{contract.AnnotationRules: `{"a":{"restartBudget":{"maxRestarts":3}}}`}
	if err := RulesToAnnotation(&pod.ObjectMeta, &pod.Spec); err != nil {
		t.Fatalf("limits only: %v", err)
	}
	if got := pod.Annotations[contract.AnnotationRules]; !strings.Contains(got, `"restartBudget":{"maxRestarts":3}`) || !strings.Contains(got, `"restartPolicyRules":[`) {
		t.Fatalf("limits only: annotation %s, want the budget and the moved rules", got)
	}
	if _, err := injector.PodRules(pod, "spec", "pod p"); err != nil {
		t.Fatal(err)
	}

	pod = carrierPod()
	pod.Annotations = map[string]string{contract.AnnotationRules: `{"a":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[1]}}]}}`}
	err := RulesToAnnotation(&pod.ObjectMeta, &pod.Spec)
	if err == nil || !strings.Contains(err.Error(), `container "a"`) {
		t.Fatalf("disagreeing annotation: err = %v, want one naming container a", err)
	}
}

func TestFeatureGatesBefore134(t *testing.T) {
	for _, on := range []bool{true, false} {
		if g := FeatureGates("v1.33.13", on); len(g) != 0 {
			t.Errorf("FeatureGates(v1.33.13, %v) = %v: the release has none of the gates", on, g)
		}
		if g := FeatureGates("v1.34.4", on); len(g) != 1 || g[0].Name != "ContainerRestartRules" || g[0].On != on {
			t.Errorf("FeatureGates(v1.34.4, %v) = %v", on, g)
		}
	}
	if a := gateArgs(nil); len(a) != 0 {
		t.Errorf("gateArgs(nil) = %q, want no argument", a)
	}
	if y := gateYAML(nil); y != "" {
		t.Errorf("gateYAML(nil) = %q, want nothing", y)
	}
}
