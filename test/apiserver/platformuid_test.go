package apiserver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestPlatformUIDUnderAPolicyThatForbidsFixedUIDs: a platform that assigns
// each namespace's UIDs itself (OpenShift's restricted-v2 SCC) refuses a
// fixed runAsUser. Here a ValidatingAdmissionPolicy on a real API server
// stands for it: no container may name a runAsUser. A pod injected as by
// default names 65532 in its install container and is refused; injected
// with --platform-uid it names none (runAsNonRoot stays) and is admitted.
func TestPlatformUIDUnderAPolicyThatForbidsFixedUIDs(t *testing.T) {
	_, client := startAPIServer(t, kubeAssets(t), true)
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "os",
		Labels: map[string]string{"uid-range": "assigned"}}}, metav1.CreateOptions{})
	must(t, err)
	fail := admissionregistrationv1.Fail
	_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-fixed-uid"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.runAsUser)) && " +
					"(!has(object.spec.initContainers) || object.spec.initContainers.all(c, !has(c.securityContext) || !has(c.securityContext.runAsUser)))",
				Message: "the platform assigns UIDs: no container may name a runAsUser"}},
		}}, metav1.CreateOptions{})
	must(t, err)
	_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "no-fixed-uid"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "no-fixed-uid",
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"uid-range": "assigned"}}}},
	}, metav1.CreateOptions{})
	must(t, err)
	src := filepath.Join(dir, "pod.yaml")
	must(t, os.WriteFile(src, []byte(`apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: os}
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: registry.test/trainer:1
    command: [/train]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
`), 0o644))
	create := func(name string, flags ...string) error {
		t.Helper()
		out, err := exec.Command(bin, append(append([]string{"inject", "--no-lookup", "--delivery=copy", "-q"}, flags...), "-f", src)...).Output()
		must(t, err)
		var pod corev1.Pod
		must(t, yaml.Unmarshal(out, &pod))
		pod.Name = name
		_, err = client.CoreV1().Pods("os").Create(ctx, &pod, metav1.CreateOptions{})
		return err
	}
	// The policy takes a moment to reach the API server's admission chain.
	waitFor(t, "the policy to refuse a fixed UID", 60*time.Second, func(context.Context) (bool, error) {
		err := create("fixed")
		return err != nil && strings.Contains(err.Error(), "the platform assigns UIDs"), nil
	})
	if err := create("assigned", "--platform-uid"); err != nil {
		t.Fatalf("a pod injected with --platform-uid: %v", err)
	}
	got, err := client.CoreV1().Pods("os").Get(ctx, "assigned", metav1.GetOptions{})
	must(t, err)
	if sc := got.Spec.InitContainers[0].SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("the install container's securityContext %+v, want no runAsUser and runAsNonRoot true", sc)
	}
}
