package injector

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
)

func podYAML(t *testing.T, s string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	if err := kubeyaml.UnmarshalStrict([]byte(s), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestErrors: bad input gives one line naming the object, the container
// and the field, with the API server's wording for invalid rules.
func TestErrors(t *testing.T) {
	cases := []struct {
		name, pod, want string
	}{
		{"invalid operator", `
metadata: {name: p}
spec:
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: Foo, values: [1]}}]`,
			`pod "p": spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Foo": supported values: "In", "NotIn"`},
		{"rules without policy", `
metadata: {name: p, namespace: ns}
spec:
  containers:
  - {name: other, command: [x]}
  - name: app
    command: [x]
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]`,
			`pod "ns/p": spec.containers[1].restartPolicy: Required value: must specify restartPolicy when restart rules are used`},
		{"probe on an unknown named port", `
metadata: {name: p}
spec:
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]
    livenessProbe: {httpGet: {port: web}}`,
			`pod "p": container "app": livenessProbe: httpGet.port: named port "web" is not among the container's ports`},
		{"probe without a handler", `
metadata: {name: p}
spec:
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]
    startupProbe: {periodSeconds: 1}`,
			`pod "p": container "app": probes.startup: Required value: must specify a handler type (exec, httpGet, tcpSocket, grpc)`},
		{"invalid action in annotation", `
metadata:
  generateName: web-
  annotations:
    restart-supervisor.dev/rules: '{"app": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "Explode", "exitCodes": {"operator": "In"}}]}}'
spec:
  containers:
  - {name: app, command: [x]}`,
			`pod "web-*": spec.containers[0].restartPolicyRules[0].action: Unsupported value: "Explode": supported values: "Restart", "RestartAllContainers", "RestartGroup"`},
		{"unknown container in annotation", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: '{"ghost": {"restartPolicy": "Never"}}'
spec:
  containers:
  - {name: app, command: [x]}`,
			`pod "p": metadata.annotations[restart-supervisor.dev/rules]: no container named "ghost" in the pod`},
		{"unknown field in annotation", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: "app:\n  restartPolicyRule: []\n"
spec:
  containers:
  - {name: app, command: [x]}`,
			`pod "p": metadata.annotations[restart-supervisor.dev/rules]: line 2: unknown field "restartPolicyRule"`},
		{"carriers disagree", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: '{"app": {"restartPolicy": "OnFailure"}}'
spec:
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": container "app": restartPolicy "Never" in the container disagrees with "OnFailure" in annotation restart-supervisor.dev/rules`},
		{"carriers disagree on rules", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: '{"app": {"restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [2]}}]}}'
spec:
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]`,
			`pod "p": container "app": restartPolicyRules in the container disagree with those in annotation restart-supervisor.dev/rules`},
		{"ephemeral container with rules", `
metadata: {name: p}
spec:
  containers:
  - {name: app, command: [x]}
  ephemeralContainers:
  - {name: debug, restartPolicy: Never}`,
			`pod "p": spec.ephemeralContainers[0].restartPolicy: Forbidden: cannot be set for an Ephemeral Container`},
		{"ephemeral container in annotation", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: '{"debug": {"restartPolicy": "Never"}}'
spec:
  containers:
  - {name: app, command: [x]}
  ephemeralContainers:
  - {name: debug}`,
			`pod "p": metadata.annotations[restart-supervisor.dev/rules]: container "debug" is an ephemeral container: restart rules cannot be set for an Ephemeral Container`},
		{"sidecar from the annotation", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/rules: '{"init": {"restartPolicy": "Always"}}'
spec:
  initContainers:
  - {name: init, command: [x]}
  containers:
  - {name: app, command: [x]}`,
			`pod "p": container "init": restartPolicy Always on an init container makes it a sidecar; set it on the container itself, not in annotation restart-supervisor.dev/rules`},
		{"reserved volume name", `
metadata: {name: p}
spec:
  volumes: [{name: restart-supervisor-bin}]
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.volumes[0].name: "restart-supervisor-bin" is reserved for restart-supervisor`},
		{"windows", `
metadata: {name: p}
spec:
  os: {name: windows}
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.os.name: restart-supervisor runs Linux containers only`},
		{"windows by nodeSelector", `
metadata: {name: p}
spec:
  nodeSelector: {kubernetes.io/os: windows}
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.nodeSelector: kubernetes.io/os=windows: restart-supervisor runs Linux containers only`},
		{"windows by node affinity", `
metadata: {name: p}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: kubernetes.io/os, operator: In, values: [windows]}
          - {key: kubernetes.io/arch, operator: In, values: [amd64]}
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: kubernetes.io/os windows: restart-supervisor runs Linux containers only`},
		{"bad override", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/entrypoint.app: '"/bin/app"'
spec:
  containers:
  - {name: app, image: x, restartPolicy: Never}`,
			`pod "p": metadata.annotations[restart-supervisor.dev/entrypoint.app]: want a non-empty JSON array of strings`},
		{"rules added after injection", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/status: '{"version":"v0.1.0","containers":["a"]}'
spec:
  containers:
  - {name: a, command: [x]}
  - {name: b, command: [x], restartPolicy: Never}`,
			`pod "p": spec.containers[1]: container "b" carries restart rules but the pod was injected without it (annotation restart-supervisor.dev/status); inject the original manifest again`},
	}
	inj := New(Options{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := inj.MutatePod(context.Background(), podYAML(t, tc.pod))
			if err == nil {
				t.Fatalf("no error, want %s", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestTemplateErrorsUseTemplatePath(t *testing.T) {
	obj := &unstructured.Unstructured{}
	if err := kubeyaml.Unmarshal([]byte(`
apiVersion: batch/v1
kind: CronJob
metadata: {name: c, namespace: prod}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers:
          - {name: a, command: [x], restartPolicy: Sometimes}
`), &obj.Object); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{}).MutateObject(context.Background(), obj)
	want := `CronJob "prod/c": spec.jobTemplate.spec.template.spec.containers[0].restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure"`
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

// TestEntrypointErrors: a container without command needs the registry or
// an override; failures are *EntrypointError naming container and image.
func TestEntrypointErrors(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "registry.test/app:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyNever)}}}}
	_, err := New(Options{}).MutatePod(context.Background(), pod)
	var ee *EntrypointError
	if !errors.As(err, &ee) || ee.Container != "app" || ee.Image != "registry.test/app:1" {
		t.Fatalf("no lookup: got %v", err)
	}
	want := `pod "p": container "app": cannot determine the entrypoint of image "registry.test/app:1": container has no command and registry lookup is disabled (set command, or the annotation restart-supervisor.dev/entrypoint.app)`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}

	inj, _ := goldenInjector(t)
	pod.Spec.Containers[0].Image = "registry.test/missing:1"
	_, err = inj.MutatePod(context.Background(), pod)
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "registry registry.test answered HTTP 404 Not Found") {
		t.Errorf("missing image: got %v", err)
	}
	// An image with neither ENTRYPOINT nor CMD and no args has nothing to run.
	tr := testregistry.New(t)
	tr.Push(t, "registry.test/empty:1", testregistry.Image(t, "linux", "amd64", nil, nil))
	inj = New(Options{Resolver: registry.New(registry.Options{Transport: tr.Transport})})
	pod.Spec.Containers[0].Image = "registry.test/empty:1"
	_, err = inj.MutatePod(context.Background(), pod)
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "has neither ENTRYPOINT nor CMD") {
		t.Errorf("empty image: got %v", err)
	}
}
