package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// applyDeployments are Deployments made the way kubectl create makes them
// (no last-applied configuration), one per probe handler kind, with rules
// in the annotation and readiness, startup and liveness probes.
func applyDeployments() string {
	var b strings.Builder
	for _, h := range []struct{ name, handler string }{
		{"exec", "exec: {command: [cat, /ready]}"},
		{"httpget", "httpGet: {path: /healthz, port: 8080}"},
		{"tcpsocket", "tcpSocket: {port: 8080}"},
		{"grpc", "grpc: {port: 8080}"},
	} {
		fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata:
      labels: {app: %[1]s}
      annotations:
        restart-supervisor.dev/rules: '{"web": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}}'
    spec:
      containers:
      - name: web
        image: registry.test/web:1
        command: [/web]
        ports: [{containerPort: 8080}]
        readinessProbe: {%[2]s, periodSeconds: 5}
        startupProbe: {%[2]s, initialDelaySeconds: 3}
        livenessProbe: {%[2]s}
`, h.name, h.handler)
	}
	return b.String()
}

// TestApplyOverLiveObjects runs istioctl's workflow with the real kubectl
// on a real API server: `kubectl get -o yaml|json | restart-injector
// inject -f - | kubectl apply -f -` over live Deployments, a List of them,
// whose probes are of each handler kind. apply merges the injected object
// into the live one (strategic merge patch); it used to keep the live
// httpGet beside the injected exec, which the API server refuses.
func TestApplyOverLiveObjects(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, false)
	ctx := context.Background()
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	kubectl := filepath.Join(assets, "kubectl")
	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, format := range []string{"yaml", "json"} {
		t.Run(format, func(t *testing.T) {
			create := exec.Command(kubectl, "--kubeconfig", admin, "create", "-f", "-")
			create.Stdin = strings.NewReader(applyDeployments())
			if out, err := create.CombinedOutput(); err != nil {
				t.Fatalf("kubectl create: %v\n%s", err, out)
			}
			defer func() {
				_ = exec.Command(kubectl, "--kubeconfig", admin, "delete", "deploy", "--all", "-n", "default", "--wait=false").Run()
			}()
			pipe := fmt.Sprintf("%q --kubeconfig %q get deploy -n default -o %s | %q inject --no-lookup -f - | %q --kubeconfig %q apply -f -",
				kubectl, admin, format, bin, kubectl, admin)
			out, err := exec.Command("bash", "-o", "pipefail", "-c", pipe).CombinedOutput()
			t.Logf("%s\n%s", pipe, out)
			if err != nil {
				t.Fatalf("the pipe failed: %v", err)
			}
			list, err := client.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 4 {
				t.Fatalf("%d Deployments", len(list.Items))
			}
			for _, d := range list.Items {
				checkApplied(t, d)
			}
		})
	}
}

func checkApplied(t *testing.T, d appsv1.Deployment) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	kinds := func(p *corev1.Probe) string {
		if p == nil {
			return "none"
		}
		b, _ := json.Marshal(p.ProbeHandler)
		return string(b)
	}
	ready := `{"exec":{"command":["/opt/restart-supervisor/restart-probe","ready"]}}`
	started := `{"exec":{"command":["/opt/restart-supervisor/restart-probe","started"]}}`
	if got := kinds(c.ReadinessProbe); got != ready {
		t.Errorf("%s: readinessProbe %s, want %s", d.Name, got, ready)
	}
	if got := kinds(c.StartupProbe); got != started {
		t.Errorf("%s: startupProbe %s, want %s", d.Name, got, started)
	}
	if c.StartupProbe != nil && c.StartupProbe.InitialDelaySeconds != 0 {
		t.Errorf("%s: the live startup probe's initialDelaySeconds %d stayed", d.Name, c.StartupProbe.InitialDelaySeconds)
	}
	if c.LivenessProbe != nil {
		t.Errorf("%s: the live livenessProbe stayed: %s", d.Name, kinds(c.LivenessProbe))
	}
	if _, ok := d.Spec.Template.Annotations["restart-supervisor.dev/status"]; !ok {
		t.Errorf("%s: not injected", d.Name)
	}
}
