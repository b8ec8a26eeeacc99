package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestKustomizeRenders renders every installation variant with the
// kustomize built into kubectl.
func TestKustomizeRenders(t *testing.T) {
	kubectl := filepath.Join(kubeAssets(t), "kubectl")
	root := repoRoot(t)
	for _, dir := range []string{"deploy", "deploy/self-managed"} {
		out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
		}
		for _, want := range []string{"kind: MutatingWebhookConfiguration", "kind: Deployment", "kind: PodDisruptionBudget", "matchConditions:"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("%s renders without %q", dir, want)
			}
		}
		switch dir {
		case "deploy":
			if !bytes.Contains(out, []byte("cert-manager.io/inject-ca-from: restart-supervisor/restart-injector")) {
				t.Errorf("%s: no cert-manager CA injection", dir)
			}
		case "deploy/self-managed":
			if !bytes.Contains(out, []byte("--cert-mode=self")) || bytes.Contains(out, []byte("cert-manager")) {
				t.Errorf("%s: not the self-managed variant", dir)
			}
		}
	}
	// Each component on top of a variant: what it must add.
	tmp := t.TempDir()
	rel, _ := filepath.Rel(tmp, filepath.Join(root, "deploy"))
	for _, c := range []struct {
		variant, component string
		want               []string
	}{
		{"/self-managed", "namespace-opt-in", []string{"key: restart-supervisor.dev/inject"}},
		{"/self-managed", "webhook-ingress", []string{"kind: NetworkPolicy", "port: 8443"}},
		{"", "custom-workloads", []string{"name: custom-templates.restart-supervisor.dev", "- jobsets"}},
	} {
		k := fmt.Sprintf("resources: [%s%s]\ncomponents: [%s/components/%s]\n", rel, c.variant, rel, c.component)
		if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kubectl, "kustomize", tmp).CombinedOutput()
		if err != nil {
			t.Fatalf("%s component: %v\n%s", c.component, err, out)
		}
		for _, w := range c.want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%s component renders without %q:\n%s", c.component, w, out)
			}
		}
	}
}

// TestInstalledBinaryAsServiceAccount installs deploy/self-managed with
// kubectl apply -k, then runs the built restart-injector binary with the
// identity of the webhook's ServiceAccount, so the shipped RBAC is what
// authorizes its self-managed certificates and --native=auto checks.
func TestInstalledBinaryAsServiceAccount(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	kubectl := filepath.Join(assets, "kubectl")
	dir := t.TempDir()

	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	out, err := exec.Command(kubectl, "--kubeconfig", admin, "apply", "-k", filepath.Join(repoRoot(t), "deploy", "self-managed")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k deploy/self-managed: %v\n%s", err, out)
	}
	t.Logf("kubectl apply -k deploy/self-managed:\n%s", out)
	if bytes.Contains(out, []byte("PodSecurity")) {
		t.Errorf("the webhook's own Deployment violates its namespace's Pod Security level:\n%s", out)
	}
	serveAsInstalled(t, env, client, dir, "restart-supervisor", "restart-injector", nil)
}

// serveAsInstalled runs the built restart-injector binary as the installed
// webhook would run (--cert-mode=self, --native=auto), with the identity of
// its ServiceAccount, after pointing the installed MutatingWebhookConfiguration
// restart-injector at it; then a ruled pod must be injected through that
// configuration, and SIGTERM must drain. The installed RBAC is what
// authorizes the CA Secret, the caBundle patch and the native checks.
// serveAsInstalled runs the built webhook as the ServiceAccount name of
// namespace ns, for the MutatingWebhookConfiguration name (pointed at it on
// loopback), with args (the names the installed Deployment passes); during,
// unless nil, runs while it serves.
func serveAsInstalled(t *testing.T, env *envtest.Environment, client kubernetes.Interface, dir, ns, name string, during func(), args ...string) {
	t.Helper()
	ctx := context.Background()
	port, healthPort := freePort(t), freePort(t)
	patch := fmt.Sprintf(`[{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://127.0.0.1:%d/mutate"}]`, port)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sa := kubeconfigFor(t, env, dir, "sa", envtest.User{Name: "system:serviceaccount:" + ns + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}})
	var logs testutil.SyncBuffer
	cmd := exec.Command(bin, append([]string{"serve", "--cert-mode=self", "--extra-sans=127.0.0.1", "--kubeconfig=" + sa,
		"--namespace=" + ns, fmt.Sprintf("--listen=127.0.0.1:%d", port), fmt.Sprintf("--health-listen=127.0.0.1:%d", healthPort),
		"--native=auto", "--supervisor-image=" + supervisorImage, "--shutdown-delay=500ms", "--log-format=text", "--cert-dir=" + filepath.Join(dir, "tls")},
		args...)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		t.Logf("restart-injector logs:\n%s", logs.String())
	})

	health := fmt.Sprintf("http://127.0.0.1:%d", healthPort)
	waitFor(t, "/readyz", 60*time.Second, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("restart-injector exited: %v", err)
		default:
		}
		resp, err := http.Get(health + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == 200, fmt.Errorf("HTTP %d", resp.StatusCode)
	})
	var p *corev1.Pod
	waitFor(t, "a ruled pod to be injected through the installed configuration", 30*time.Second, func(ctx context.Context) (bool, error) {
		pod := nativeRulesPod("installed")
		pod.Name, pod.GenerateName = "", "installed-"
		got, err := client.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{})
		p = got
		return err == nil && injected(got), err
	})
	assertInjected(t, p, "trainer")
	if during != nil {
		during()
	}

	metrics := get(t, health+"/metrics")
	for _, want := range []string{`restart_injector_admission_reviews_total{result="injected"}`, "restart_injector_native_restart_rules 0",
		"restart_injector_serving_certificate_expiry_timestamp_seconds "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, want := range []string{"self-managed certificates ready", "native restart rules", "no nodes to check"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q", want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGTERM")
	}
	if !strings.Contains(logs.String(), "in-flight reviews drained") {
		t.Error("no drain on SIGTERM")
	}
}

func kubeconfigFor(t *testing.T, env *envtest.Environment, dir, name string, u envtest.User) string {
	t.Helper()
	au, err := env.AddUser(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := au.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func get(t *testing.T, url string) string {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
