package injector

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestBinVolumeMountedReadWriteIsRefused: a container that mounts the
// supervisor binary volume read-write could replace the binary every
// wrapped container runs as PID 1. Whatever the container (regular, init,
// sidecar, ephemeral; wrapped or not), the pod is refused with one line
// naming it.
func TestBinVolumeMountedReadWriteIsRefused(t *testing.T) {
	cases := []struct {
		name, pod, want string
	}{
		{"regular container without rules", `
metadata: {name: p}
spec:
  containers:
  - {name: app, command: [x], restartPolicy: Never}
  - name: tamper
    command: [x]
    volumeMounts: [{name: data, mountPath: /data}, {name: restart-supervisor-bin, mountPath: /x}]`,
			`pod "p": spec.containers[1].volumeMounts[1]: container "tamper" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
		{"wrapped container", `
metadata: {name: p}
spec:
  containers:
  - name: app
    command: [x]
    restartPolicy: Never
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /x, readOnly: false}]`,
			`pod "p": spec.containers[0].volumeMounts[0]: container "app" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
		{"init container", `
metadata: {name: p}
spec:
  initContainers:
  - name: setup
    command: [x]
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /x}]
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.initContainers[0].volumeMounts[0]: container "setup" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
		{"sidecar", `
metadata: {name: p}
spec:
  initContainers:
  - {name: setup, command: [x]}
  - name: proxy
    command: [x]
    restartPolicy: Always
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /x, subPath: restart-supervisor}]
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
			`pod "p": spec.initContainers[1].volumeMounts[0]: container "proxy" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
		{"ephemeral container", `
metadata: {name: p}
spec:
  containers:
  - {name: app, command: [x], restartPolicy: Never}
  ephemeralContainers:
  - name: debug
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /x}]`,
			`pod "p": spec.ephemeralContainers[0].volumeMounts[0]: container "debug" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
		{"injected already", `
metadata:
  name: p
  annotations:
    restart-supervisor.dev/status: '{"version":"v0.1.0","containers":["app"]}'
spec:
  volumes: [{name: restart-supervisor-bin, emptyDir: {}}, {name: restart-supervisor-state, emptyDir: {}}]
  initContainers:
  - name: restart-supervisor-install
    command: [/restart-supervisor, install, /opt/restart-supervisor]
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /opt/restart-supervisor}]
  containers:
  - name: app
    command: [/opt/restart-supervisor/restart-supervisor, --, x]
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /opt/restart-supervisor, readOnly: true}]
  - name: added-later
    command: [x]
    volumeMounts: [{name: restart-supervisor-bin, mountPath: /x}]`,
			`pod "p": spec.containers[1].volumeMounts[0]: container "added-later" mounts restart-supervisor-bin read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true`},
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
		})
	}
}

// TestBinVolumeMountedReadOnlyIsKept: a container may read the binary, e.g.
// to run `restart-supervisor status`; every container that mounts the
// volume in the result, but the install container, mounts it read-only.
func TestBinVolumeMountedReadOnlyIsKept(t *testing.T) {
	pod := podYAML(t, `
metadata: {name: p}
spec:
  containers:
  - {name: app, command: [x], restartPolicy: Never}
  - name: status
    command: [/opt/tools/restart-supervisor, status]
    volumeMounts:
    - {name: restart-supervisor-bin, mountPath: /opt/tools, readOnly: true}
    - {name: restart-supervisor-state, mountPath: /run/restart-supervisor}`)
	out, err := New(Options{}).MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	mounts := 0
	for _, c := range append(out.Pod.Spec.InitContainers, out.Pod.Spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			if vm.Name != contract.BinVolume {
				continue
			}
			mounts++
			if !vm.ReadOnly && c.Name != contract.InstallContainer {
				t.Errorf("container %q mounts %s read-write", c.Name, contract.BinVolume)
			}
		}
	}
	if mounts != 3 {
		t.Fatalf("%d mounts of %s, want 3 (install, app, status)", mounts, contract.BinVolume)
	}
}

// TestBinVolumeTemplateErrorNamesTheTemplatePath: in a workload, the error
// names the field of the template.
func TestBinVolumeTemplateErrorNamesTheTemplatePath(t *testing.T) {
	obj := &unstructured.Unstructured{}
	if err := kubeyaml.Unmarshal([]byte(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: prod}
spec:
  template:
    spec:
      containers:
      - {name: app, command: [x], restartPolicy: Never}
      - name: tamper
        command: [x]
        volumeMounts: [{name: restart-supervisor-bin, mountPath: /x}]
`), &obj.Object); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{}).MutateObject(context.Background(), obj)
	want := `Deployment "prod/d": spec.template.spec.containers[1].volumeMounts[0]: container "tamper" mounts restart-supervisor-bin read-write`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got  %v\nwant %s...", err, want)
	}
}
