package injector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func backoffPod(annotation string) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	rule := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{
			{Name: "a", Image: "busybox", Command: []string{"a"}, RestartPolicy: &never, RestartPolicyRules: rule},
			{Name: "b", Image: "busybox", Command: []string{"b"}, RestartPolicy: &never, RestartPolicyRules: rule},
		}},
	}
	if annotation != "" {
		pod.Annotations = map[string]string{contract.AnnotationRules: annotation}
	}
	return pod
}

// TestBackoffFromOptionsAndAnnotation: the nodes' back-off (Options.Backoff,
// the -backoff-initial and -backoff-max flags) reaches every wrapped
// container's config, and a container's own `backoff` in the rules
// annotation overrides it field by field.
func TestBackoffFromOptionsAndAnnotation(t *testing.T) {
	d := func(s string) *rules.Duration {
		v, _ := time.ParseDuration(s)
		rd := rules.Duration(v)
		return &rd
	}
	res, err := New(Options{Backoff: rules.Backoff{Initial: d("1s"), Max: d("30s")}}).
		MutatePod(context.Background(), backoffPod("a: {backoff: {max: 60s}}"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]time.Duration{"a": {time.Second, time.Minute}, "b": {time.Second, 30 * time.Second}}
	for i := range res.Pod.Spec.Containers {
		c := &res.Pod.Spec.Containers[i]
		doc, ok := envOf(c, contract.EnvConfig)
		if !ok {
			t.Fatalf("container %s: no %s", c.Name, contract.EnvConfig)
		}
		var cfg rules.Config
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		if got := [2]time.Duration{cfg.Backoff.InitialDelay(), cfg.Backoff.MaxDelay()}; got != want[c.Name] {
			t.Errorf("container %s: back-off initial, max %v, want %v", c.Name, got, want[c.Name])
		}
	}
	// Without either, the kubelet's defaults, and nothing written.
	res, err = New(Options{}).MutatePod(context.Background(), backoffPod(""))
	if err != nil {
		t.Fatal(err)
	}
	if doc, _ := envOf(&res.Pod.Spec.Containers[0], contract.EnvConfig); strings.Contains(doc, "backoff") {
		t.Errorf("config %s: want no backoff", doc)
	}
}

func TestBackoffAnnotationErrors(t *testing.T) {
	for _, tc := range []struct{ ann, want string }{
		{"a: {backoff: {max: soon}}", `backoff.max: Invalid value: "soon"`},
		{"a: {backoff: {initial: -1s}}", `backoff.initial: Invalid value: "-1s"`},
		{"a: {backoff: {resetAfter: 1m}}", `unknown field "resetAfter"`},
		{"a: {backoff: 60s}", "backoff: must be a mapping"},
	} {
		_, err := New(Options{}).MutatePod(context.Background(), backoffPod(tc.ann))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), contract.AnnotationRules) || strings.Contains(err.Error(), "\n") {
			t.Errorf("annotation %q: error %v, want one line with %q naming the annotation", tc.ann, err, tc.want)
		}
	}
}
