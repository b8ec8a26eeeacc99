package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// envValidationVersions lists more Kubernetes releases (such as
// "v1.35.4,v1.36.3") to check validation against, beside the default one of
// hack/kube-binaries.sh; each is built by that script (minutes, once).
const envValidationVersions = "KUBE_VALIDATION_VERSIONS"

// TestValidationMatchesAPIServer creates (dry-run) pods with restart fields
// that one release or another refuses and compares, field error by field
// error, the API server's own answer with rules.KubeVersion.Validate and
// ValidateInit for that server's version: the same errors, byte for byte,
// and the same pods accepted.
func TestValidationMatchesAPIServer(t *testing.T) {
	forEachAPIServer(t, func(t *testing.T, client kubernetes.Interface, gitVersion string, kv rules.KubeVersion) {
		t.Logf("kube-apiserver %s, validated like %s", gitVersion, kv)
		compareValidation(t, client, kv)
	})
}

// forEachAPIServer runs f against a real API server (gate
// ContainerRestartRules on) of the default release and of each release
// listed in KUBE_VALIDATION_VERSIONS.
func forEachAPIServer(t *testing.T, f func(t *testing.T, client kubernetes.Interface, gitVersion string, kv rules.KubeVersion)) {
	versions := []string{""}
	for _, v := range strings.Split(os.Getenv(envValidationVersions), ",") {
		if v = strings.TrimSpace(v); v != "" {
			versions = append(versions, v)
		}
	}
	for _, version := range versions {
		name := version
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			assets := kubeAssetsFor(t, version)
			// envtest prefers KUBEBUILDER_ASSETS to the directory it is given.
			t.Setenv("KUBEBUILDER_ASSETS", assets)
			_, client := startAPIServer(t, assets, true)
			info, err := client.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			kv, err := rules.ServerKubeVersion(info.GitVersion)
			if err != nil {
				t.Fatal(err)
			}
			if version != "" && !strings.HasPrefix(info.GitVersion, version) {
				t.Fatalf("asked for %s, the API server is %s", version, info.GitVersion)
			}
			f(t, client, info.GitVersion, kv)
		})
	}
}

// validationCases are pods whose containers carry the restart fields that
// the releases validate differently, and the ones they validate alike.
func validationCases() map[string]*corev1.Pod {
	rule := func(action corev1.ContainerRestartRuleAction, op corev1.ContainerRestartRuleOnExitCodesOperator, values ...int32) corev1.ContainerRestartRule {
		return corev1.ContainerRestartRule{Action: action, ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values}}
	}
	restart := func(values ...int32) corev1.ContainerRestartRule {
		return rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpIn, values...)
	}
	many := func(n int) []corev1.ContainerRestartRule {
		r := make([]corev1.ContainerRestartRule, n)
		for i := range r {
			r[i] = restart(int32(i))
		}
		return r
	}
	values := make([]int32, 256)
	for i := range values {
		values[i] = int32(i)
	}
	policy := func(p corev1.ContainerRestartPolicy) *corev1.ContainerRestartPolicy { return &p }
	ctr := func(name string, p *corev1.ContainerRestartPolicy, r ...corev1.ContainerRestartRule) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.test/x:1", RestartPolicy: p, RestartPolicyRules: r}
	}
	pod := func(init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
		if len(containers) == 0 {
			containers = []corev1.Container{ctr("app", nil)}
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "validation", Namespace: "default"},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
				InitContainers: init, Containers: containers},
		}
	}
	never, always, onFailure := policy(corev1.ContainerRestartPolicyNever), policy(corev1.ContainerRestartPolicyAlways), policy(corev1.ContainerRestartPolicyOnFailure)
	return map[string]*corev1.Pod{
		"valid rules": pod(nil, ctr("app", never, restart(42), rule(corev1.ContainerRestartRuleActionRestart, corev1.ContainerRestartRuleOnExitCodesOpNotIn, 0))),
		"21 rules":    pod(nil, ctr("app", never, many(21)...)),
		"256 values":  pod(nil, ctr("app", never, restart(values...))),
		"RestartAllContainers": pod(nil, ctr("app", never,
			rule(corev1.ContainerRestartRuleActionRestartAllContainers, corev1.ContainerRestartRuleOnExitCodesOpIn, 42))),
		"unknown action, quoted":    pod(nil, ctr("app", never, rule("<Re\tstart>", corev1.ContainerRestartRuleOnExitCodesOpIn, 1))),
		"empty action and operator": pod(nil, ctr("app", never, rule("", "", 1))),
		"no exitCodes":              pod(nil, ctr("app", never, corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestart})),
		"unsupported policy":        pod(nil, ctr("app", policy("Sometimes"), restart(1))),
		"rules without policy":      pod(nil, ctr("app", nil, append(many(20), rule("X", "Y", 1))...)),
		"sidecar with rules":        pod([]corev1.Container{ctr("proxy", always, restart(3))}),
		"sidecar with invalid rules": pod([]corev1.Container{ctr("proxy", always, append(many(21),
			rule(corev1.ContainerRestartRuleActionRestartAllContainers, "Maybe", 1))...)}),
		"init container with rules":          pod([]corev1.Container{ctr("setup", onFailure, restart(3))}),
		"init container with invalid rules":  pod([]corev1.Container{ctr("setup", never, many(21)...)}),
		"init container without policy":      pod([]corev1.Container{ctr("setup", nil, restart(3))}),
		"init container without policy, bad": pod([]corev1.Container{ctr("setup", nil, append(many(21), rule("X", "Y"))...)}),
		"several containers, several errors": pod([]corev1.Container{ctr("proxy", always, restart(3)), ctr("setup", nil, restart(1))},
			ctr("a", never, rule(corev1.ContainerRestartRuleActionRestartAllContainers, "", 1)), ctr("b", nil, restart(values...))),
	}
}

type fieldError struct{ field, body string }

func (e fieldError) String() string { return e.field + ": " + e.body }

func compareValidation(t *testing.T, client kubernetes.Interface, v rules.KubeVersion) {
	ctx := context.Background()
	cases := validationCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	slices.Sort(names)
	refused := 0
	for _, name := range names {
		pod := cases[name]
		t.Run(name, func(t *testing.T) {
			var want []fieldError
			for _, e := range projectErrors(t, pod, v) {
				want = append(want, fieldError{e.Field, e.Body})
			}
			_, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			var got []fieldError
			if err != nil {
				var se *apierrors.StatusError
				if !errors.As(err, &se) || !apierrors.IsInvalid(err) || se.ErrStatus.Details == nil {
					t.Fatalf("dry-run create: not a validation error: %v", err)
				}
				for _, c := range se.ErrStatus.Details.Causes {
					got = append(got, fieldError{c.Field, c.Message})
				}
				// What kubectl prints holds each error as "field: body".
				for _, e := range want {
					if !strings.Contains(se.ErrStatus.Message, e.String()) {
						t.Errorf("API server message %q lacks %q", se.ErrStatus.Message, e.String())
					}
				}
				refused++
			}
			if g, w := lines(got), lines(want); g != w {
				t.Errorf("Kubernetes %s\nAPI server:\n  %s\nrules:\n  %s", v, g, w)
			}
		})
	}
	if refused == 0 {
		t.Fatal("the API server refused no pod: is ContainerRestartRules on?")
	}
}

// projectErrors validates every container of pod as the project does.
func projectErrors(t *testing.T, pod *corev1.Pod, v rules.KubeVersion) rules.ErrorList {
	var errs rules.ErrorList
	for _, list := range []struct {
		field string
		cs    []corev1.Container
		init  bool
	}{{"spec.initContainers", pod.Spec.InitContainers, true}, {"spec.containers", pod.Spec.Containers, false}} {
		for i, c := range list.cs {
			rc := rules.Container{RestartPolicy: (*rules.RestartPolicy)(c.RestartPolicy)}
			for _, r := range c.RestartPolicyRules {
				rr := rules.Rule{Action: rules.Action(r.Action)}
				if r.ExitCodes != nil {
					rr.ExitCodes = &rules.ExitCodes{Operator: rules.Operator(r.ExitCodes.Operator), Values: r.ExitCodes.Values}
				}
				rc.RestartPolicyRules = append(rc.RestartPolicyRules, rr)
			}
			path := fmt.Sprintf("%s[%d]", list.field, i)
			if list.init {
				errs = append(errs, v.ValidateInit(rc, path)...)
			} else {
				errs = append(errs, v.Validate(rc, path)...)
			}
		}
	}
	return errs
}

// lines sorts the errors: the API server validates init containers and
// containers in an order of its own, the text of each error is what counts.
func lines(errs []fieldError) string {
	s := make([]string, len(errs))
	for i, e := range errs {
		s[i] = e.String()
	}
	slices.Sort(s)
	return strings.Join(s, "\n  ")
}

// TestNativeDetectionPerFeature runs --native=auto's detector against the
// real API server of each release (the default one, and those listed in
// KUBE_VALIDATION_VERSIONS) with nodes whose kubelets are of one release or
// more (a cluster in the middle of an upgrade): restartPolicyRules are left
// to the cluster from 1.35.4 kubelets on (1.35.0–1.35.3 have
// kubernetes#136910), RestartAllContainers only where the API server
// accepts the action, every kubelet is 1.36 or newer and every node
// declares the feature (a 1.37 kubelet with its gate off does not).
func TestNativeDetectionPerFeature(t *testing.T) {
	forEachAPIServer(t, func(t *testing.T, client kubernetes.Interface, gitVersion string, kv rules.KubeVersion) {
		// The RestartAllContainers action is accepted from 1.36 on with
		// default gates (alpha, off, in 1.35; unknown in 1.34).
		serverAll := kv >= rules.Kube136
		ctx := context.Background()
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rs"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		d := &webhook.NativeDetector{Client: client, Namespace: "rs"}
		// Only an API server with NodeDeclaredFeatures (beta and on in
		// 1.36, GA in 1.37) keeps status.declaredFeatures.
		for _, step := range []struct {
			node, kubelet string
			declared      []string
			rules, all    bool
		}{
			{"node-136", "v1.36.3", []string{webhook.DeclaredRestartAllContainers}, true, serverAll},
			{"node-137-gate-off", "v1.37.2", []string{"InPlacePodVerticalScalingInitContainers"}, true, false},
			{"node-135", "v1.35.4", nil, true, false}, // upgrade in progress: the oldest kubelet decides
			{"node-1353", "v1.35.3", nil, false, false},
			{"node-134", "v1.34.4", nil, false, false},
		} {
			addNode(t, client, step.node, step.kubelet, step.declared...)
			rulesOK, allOK, why, err := d.CheckAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rulesOK != step.rules || allOK != step.all {
				t.Errorf("API server %s, kubelets down to %s: rules %v, RestartAllContainers %v; want %v, %v (%s)",
					gitVersion, step.kubelet, rulesOK, allOK, step.rules, step.all, why)
			}
			t.Logf("API server %s, kubelets down to %s: %s", gitVersion, step.kubelet, why)
		}
		// The server validates the fields it keeps; a pod using an action
		// it refuses is wrapped, its fields removed, and validated like
		// the newest release (on 1.35 with default gates the server's own
		// validation refuses RestartAllContainers).
		wantAll := rules.NewestKube
		if serverAll {
			wantAll = kv
		}
		if got := d.ValidationVersionFor(webhook.FeatureRestartRules); got != kv {
			t.Errorf("API server %s: restart rules validated like %v, want %v", gitVersion, got, kv)
		}
		if got := d.ValidationVersionFor(webhook.FeatureRestartAllContainers); got != wantAll {
			t.Errorf("API server %s: RestartAllContainers validated like %v, want %v", gitVersion, got, wantAll)
		}
	})
}
