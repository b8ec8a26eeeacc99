package webhook

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// fakeCluster answers the detector's dry-run create, keeping or dropping
// the restart fields, and reports gitVersion from discovery.
func fakeCluster(gitVersion string, keep bool) *fake.Clientset {
	c := fake.NewClientset()
	c.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: gitVersion}
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
		if !keep {
			for i := range pod.Spec.Containers {
				pod.Spec.Containers[i].RestartPolicy, pod.Spec.Containers[i].RestartPolicyRules = nil, nil
			}
		}
		return true, pod, nil
	})
	return c
}

func TestValidationVersionFollowsTheAPIServer(t *testing.T) {
	for _, tc := range []struct {
		gitVersion string
		keep       bool
		want       rules.KubeVersion
	}{
		{"v1.34.4", true, rules.Kube134},
		{"v1.35.4", true, rules.Kube135},
		{"v1.36.3-gke.1", true, rules.Kube136},
		{"v1.39.0", true, rules.NewestKube},
		// A server that drops the fields never validates them.
		{"v1.34.4", false, rules.NewestKube},
		{"v0.0.0-master", true, rules.NewestKube},
	} {
		d := &NativeDetector{Client: fakeCluster(tc.gitVersion, tc.keep), Namespace: "rs", Log: testLogger(t)}
		if got := d.ValidationVersion(); got != rules.NewestKube {
			t.Errorf("%s before the first check: %v", tc.gitVersion, got)
		}
		if _, _, err := d.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := d.ValidationVersion(); got != tc.want {
			t.Errorf("%s, fields kept %v: validates like %v, want %v", tc.gitVersion, tc.keep, got, tc.want)
		}
	}
}

// A 1.35 API server with its default gates keeps the restart rules but
// refuses the RestartAllContainers action: a pod using it is wrapped, its
// fields never reach that server, and it is validated like the newest
// release, which accepts the action; other pods like 1.35.
func TestValidationVersionPerFeature(t *testing.T) {
	c := fakeCluster("v1.35.4", true)
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		for _, ctr := range pod.Spec.Containers {
			for _, r := range ctr.RestartPolicyRules {
				if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
					return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, pod.Name, field.ErrorList{
						field.NotSupported(field.NewPath("spec", "containers").Index(0).Child("restartPolicyRules").Index(0).Child("action"),
							r.Action, []string{"Restart"})})
				}
			}
		}
		return false, nil, nil
	})
	d := &NativeDetector{Client: c, Namespace: "rs", Log: testLogger(t)}
	if _, _, _, err := d.CheckAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.ValidationVersionFor(FeatureRestartRules); got != rules.Kube135 {
		t.Errorf("restart rules: validated like %v, want %v", got, rules.Kube135)
	}
	if got := d.ValidationVersionFor(FeatureRestartAllContainers); got != rules.NewestKube {
		t.Errorf("RestartAllContainers: validated like %v, want %v", got, rules.NewestKube)
	}

	// Between the two checks of the first CheckAll the fields are known to
	// be kept and the action not yet: a RestartAllContainers pod is then
	// validated like the newest release, not refused in the 1.35 words.
	d.keptAll.Store(0)
	if got := d.ValidationVersionFor(FeatureRestartAllContainers); got != rules.NewestKube {
		t.Errorf("RestartAllContainers before its check: validated like %v, want %v", got, rules.NewestKube)
	}

	// The same server with the action's gate on validates both like 1.35.
	d = &NativeDetector{Client: fakeCluster("v1.35.4", true), Namespace: "rs", Log: testLogger(t)}
	if _, _, _, err := d.CheckAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.ValidationVersionFor(FeatureRestartAllContainers); got != rules.Kube135 {
		t.Errorf("RestartAllContainers kept: validated like %v, want %v", got, rules.Kube135)
	}
}

const sidecarPod = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: apps}
spec:
  restartPolicy: Never
  initContainers:
  - name: proxy
    image: registry.test/proxy:1
    command: ["/proxy"]
    restartPolicy: Always
    restartPolicyRules:
    - action: Restart
      exitCodes: {operator: In, values: [3]}
  containers:
  - name: app
    image: registry.test/app:1
    command: ["/app"]
`

// The handler validates with the release KubeVersion reports.
func TestHandlerValidatesLikeKubeVersion(t *testing.T) {
	raw, err := yaml.YAMLToJSON([]byte(sidecarPod))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rules.KubeVersions() {
		h := newHandler()
		h.KubeVersion = func(NativeFeature) rules.KubeVersion { return v }
		ts := startServer(t, h)
		resp := admit(t, ts, reviewOf(t, raw, "Pod", "pods", admissionv1.Create))
		forbidden := resp.Result != nil && strings.Contains(resp.Result.Message,
			`spec.initContainers[0].restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always`)
		if wantDenied := v < rules.Kube136; resp.Allowed == wantDenied || forbidden != wantDenied {
			t.Errorf("%v: allowed %v, result %+v", v, resp.Allowed, resp.Result)
		}
	}
}
