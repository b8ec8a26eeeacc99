package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// TestNodeAgentInstalled applies the node-agent component with kubectl
// apply -k, runs the built binary's node-agent with the identity of the
// component's ServiceAccount (so the shipped RBAC is what lets it watch
// its node's pods and write Events), and reads the result with
// `restart-injector status` and `kubectl restarts` (the plugin link).
func TestNodeAgentInstalled(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	kubectl := filepath.Join(assets, "kubectl")
	dir := t.TempDir()
	root := repoRoot(t)

	kdir := filepath.Join(dir, "k")
	must(t, os.MkdirAll(kdir, 0o755))
	rel, _ := filepath.Rel(kdir, filepath.Join(root, "deploy"))
	writeK := func(components ...string) {
		k := "resources: []\ncomponents:\n"
		for _, c := range components {
			k += fmt.Sprintf("- %s/components/%s\n", rel, c)
		}
		must(t, os.WriteFile(filepath.Join(kdir, "kustomization.yaml"), []byte(k), 0o644))
	}
	writeK("node-agent", "node-agent-servicemonitor")
	out, err := exec.Command(kubectl, "kustomize", kdir).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("kind: ServiceMonitor")) || !bytes.Contains(out, []byte("kind: DaemonSet")) {
		t.Fatalf("kubectl kustomize node-agent + node-agent-servicemonitor: %v\n%s", err, out)
	}
	if n := bytes.Count(out, []byte("hostPath:")); n != 1 {
		t.Errorf("node agent renders %d hostPath volumes, want 1", n)
	}

	writeK("node-agent", "node-agent-annotate")
	out, err = exec.Command(kubectl, "kustomize", kdir).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("- --annotate")) || !bytes.Contains(out, []byte("  - pods\n  verbs:\n  - patch")) {
		t.Fatalf("kubectl kustomize node-agent + node-agent-annotate: %v\n%s", err, out)
	}

	// Without the Prometheus operator's CRDs: the component alone applies.
	writeK("node-agent")
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	out, err = exec.Command(kubectl, "--kubeconfig", admin, "apply", "-k", kdir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k node-agent: %v\n%s", err, out)
	}
	t.Logf("kubectl apply -k components/node-agent:\n%s", out)
	// The namespace warns at baseline: the hostPath is the one finding.
	if !bytes.Contains(out, []byte(`would violate PodSecurity "baseline:latest": hostPath volumes (volume "kubelet-pods")`)) {
		t.Errorf("no baseline warning naming the one hostPath volume:\n%s", out)
	}
	if w := string(out); strings.Count(w, "Warning:") != 1 || strings.Contains(w, "hostPath volumes (volume \"kubelet-pods\"),") {
		t.Errorf("the DaemonSet violates baseline by more than its hostPath:\n%s", out)
	}

	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sa := kubeconfigFor(t, env, dir, "sa", envtest.User{Name: "system:serviceaccount:restart-supervisor-node-agent:restart-supervisor-node-agent",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:restart-supervisor-node-agent", "system:authenticated"}})

	podsDir := filepath.Join(dir, "pods")
	web := createPod(t, client, "web", agentNode, "app")
	webDir := stateDir(t, podsDir, web.UID)
	writeStatus(t, webDir, "app", 0, 0, false)
	port := freePort(t)
	var logs testutil.SyncBuffer
	cmd := exec.Command(bin, "node-agent", "--kubeconfig="+sa, "--kubelet-pods-dir="+podsDir, "--interval=50ms",
		fmt.Sprintf("--metrics-listen=127.0.0.1:%d", port), "--log-format=text")
	cmd.Env = append(os.Environ(), "NODE_NAME="+agentNode)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	must(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		t.Logf("node-agent logs:\n%s", logs.String())
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitFor(t, "the agent's /healthz", 60*time.Second, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("node-agent exited: %v", err)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	for i := 1; i <= 3; i++ {
		writeStatus(t, webDir, "app", i, 0, false)
		waitMetric(t, addr, series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", "web", "container", "app", "uid", string(web.UID)), fmt.Sprint(i))
	}
	waitEvents(t, client, web, agentapi.ReasonRestarted, 3)

	// Off by default (and the component grants no patch on pods).
	if p, err := client.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{}); err != nil || p.Annotations[contract.AnnotationRestarts] != "" {
		t.Errorf("pod annotated without --annotate: %v %v", err, p.Annotations)
	}

	registerAgentPod(t, client, agentNode)
	waitFor(t, "the agent's Event-signing key", 30*time.Second, func(ctx context.Context) (bool, error) {
		published, err := agentapi.AgentKeyPublished(ctx, client, agentapi.AgentNamespace, agentNode)
		return published, err
	})
	out, err = exec.Command(bin, "status", "--kubeconfig="+admin, "-n", "default").CombinedOutput()
	t.Logf("restart-injector status -n default:\n%s", out)
	if err != nil || !strings.Contains(string(out), "web   app         3 ") {
		t.Errorf("restart-injector status: %v\n%s", err, out)
	}
	// As a kubectl plugin: a kubectl-restarts link on PATH.
	plugins := filepath.Join(dir, "plugins")
	must(t, os.MkdirAll(plugins, 0o755))
	must(t, os.Symlink(bin, filepath.Join(plugins, "kubectl-restarts")))
	plugin := exec.Command(kubectl, "restarts", "-A")
	plugin.Env = append(os.Environ(), "PATH="+plugins+":"+os.Getenv("PATH"), "KUBECONFIG="+admin)
	out, err = plugin.CombinedOutput()
	t.Logf("kubectl restarts -A:\n%s", out)
	if err != nil || !strings.Contains(string(out), "NAMESPACE") || !strings.Contains(string(out), "default     web   app") {
		t.Errorf("kubectl restarts -A: %v\n%s", err, out)
	}

	// Figures for docs/observability.md, not assertions.
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") {
				t.Logf("node-agent %s", strings.Join(strings.Fields(l), " "))
			}
		}
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid)); err == nil {
		f := strings.Fields(string(st)[strings.LastIndex(string(st), ")")+2:])
		t.Logf("node-agent CPU: utime %s + stime %s ticks", f[11], f[12])
	}
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after SIGTERM")
	}
}
