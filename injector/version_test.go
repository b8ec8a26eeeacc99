package injector

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

func versionTestPod(init corev1.Container) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{init},
			Containers: []corev1.Container{{Name: "main", Image: "x", Command: []string{"/main"}, RestartPolicy: &never,
				RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}},
		},
	}
}

func restartRule(action corev1.ContainerRestartRuleAction) []corev1.ContainerRestartRule {
	return []corev1.ContainerRestartRule{{Action: action,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}}}}
}

// TestKubeVersionSelectsValidation: the release given in Options or, over
// it, in the context decides which init-container shapes pass.
func TestKubeVersionSelectsValidation(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	sidecar := corev1.Container{Name: "proxy", Image: "x", Command: []string{"/proxy"}, RestartPolicy: &always,
		RestartPolicyRules: restartRule(corev1.ContainerRestartRuleActionRestart)}
	const forbidden = `pod "ns/p": spec.initContainers[0].restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always`
	ctx := context.Background()
	for _, tc := range []struct {
		opts, ctx rules.KubeVersion
		wantErr   string
	}{
		{0, 0, ""},
		{rules.Kube136, 0, ""},
		{rules.Kube134, 0, forbidden},
		{rules.Kube135, 0, forbidden},
		{rules.Kube134, rules.Kube136, ""},
		{0, rules.Kube135, forbidden},
	} {
		inj := New(Options{KubeVersion: tc.opts})
		_, err := inj.PodPatchWith(ctx, versionTestPod(sidecar), Call{KubeVersion: tc.ctx})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.wantErr) || (tc.wantErr == "") != (err == nil) {
			t.Errorf("options %v, context %v: err %v, want %q", tc.opts, tc.ctx, err, tc.wantErr)
		}
	}
}

// Rules on an init container without restartPolicy: 1.34 lets them through
// and its kubelet ignores them, so the container is not wrapped and keeps
// its fields; from 1.35 they are refused.
func TestInitRulesWithoutPolicy(t *testing.T) {
	init := corev1.Container{Name: "setup", Image: "x", Command: []string{"/setup"},
		RestartPolicyRules: restartRule(corev1.ContainerRestartRuleActionRestartAllContainers)}
	pod := versionTestPod(init)
	crs, err := PodRulesFor(rules.Kube134, pod, "spec", "pod")
	if err != nil {
		t.Fatal(err)
	}
	if crs[0].Ruled || len(crs[0].Rules.RestartPolicyRules) != 0 {
		t.Fatalf("1.34: init container without policy is ruled: %+v", crs[0])
	}
	res, err := New(Options{KubeVersion: rules.Kube134}).MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Containers, ",") != "main" {
		t.Fatalf("1.34: wrapped %v, want main only (the ignored RestartAllContainers rule must not wrap the pod)", res.Containers)
	}
	if got := res.Pod.Spec.InitContainers[1]; len(got.RestartPolicyRules) != 1 || got.Command[0] != "/setup" {
		t.Fatalf("1.34: init container changed: %+v", got)
	}
	for _, v := range []rules.KubeVersion{rules.Kube135, rules.Kube136, rules.Kube137} {
		_, err := PodRulesFor(v, pod, "spec", "pod")
		if err == nil || err.Error() != "pod: spec.initContainers[0].restartPolicy: Required value: must specify restartPolicy when restart rules are used" {
			t.Errorf("%s: %v", v, err)
		}
	}
}
