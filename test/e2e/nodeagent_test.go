package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestNodeAgentOnKubelet runs the node agent against a real kubelet's pods
// directory: a supervised pod whose workload the supervisor restarts in
// place three times must show three in-place restarts in the agent's
// metrics, RestartedInPlace Events on the pod (what `kubectl describe pod`
// prints), and `restart-injector status`. The excerpts it logs are the
// ones docs/observability.md shows.
func TestNodeAgentOnKubelet(t *testing.T) {
	repo, binDir := prepareNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, SupervisorImage: true, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	e := &env{mode: supervised, c: c, ns: "default"}
	e.superviseWithInjector()

	// The agent, in this process, on the kubelet's own pods directory.
	standInForAgent(ctx, t, c)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		agentDone <- nodeagent.Run(agentCtx, nodeagent.Config{
			Client: c.Client, NodeName: cluster.NodeName, PodsDir: filepath.Join(c.KubeletRoot(), "pods"),
			Interval: time.Second, MetricsListen: addr, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
			Ready: func(net.Addr) { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-agentDone:
		t.Fatalf("node agent: %v", err)
	}
	defer func() {
		stopAgent()
		if err := <-agentDone; err != nil && ctx.Err() == nil {
			t.Errorf("node agent: %v", err)
		}
	}()

	// Exits 42 three times (Restart In [42]; back-off 0 s, 10 s, 20 s),
	// then stays up.
	script := `n=$(cat /data/runs 2>/dev/null || echo 0); echo $((n+1)) > /data/runs; [ "$n" -ge 3 ] && exec sleep 3600; sleep 0.2; exit 42`
	spec := podSpec(corev1.RestartPolicyNever, 5, shell("trainer", script, policy(corev1.ContainerRestartPolicyNever), restartIn(42)))
	spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	if err := e.createPod(ctx, "agent-trainer", spec); err != nil {
		t.Fatal(err)
	}

	created, err := c.Client.CoreV1().Pods("default").Get(ctx, "agent-trainer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metric := fmt.Sprintf(`restart_supervisor_container_restarts_total{container="trainer",namespace="default",pod="agent-trainer",uid=%q} 3`, created.UID)
	var body string
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(body, metric) {
		if time.Now().After(deadline) {
			t.Fatalf("the metric never read 3; last /metrics:\n%s", grepLines(body, "restart_supervisor_"))
		}
		time.Sleep(time.Second)
		if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			body = string(b)
		}
	}
	t.Logf("/metrics:\n%s", grepLines(body, "restart_supervisor_"))

	var events []corev1.Event
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		list, err := c.Client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=agent-trainer,reason=" + agentapi.ReasonRestarted})
		if err != nil {
			t.Fatal(err)
		}
		count := int32(0)
		for _, ev := range list.Items {
			count += max(ev.Count, 1)
		}
		if count >= 3 {
			events = list.Items
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d RestartedInPlace Events, want 3: %+v", count, list.Items)
		}
	}
	for _, ev := range events {
		if ev.InvolvedObject.FieldPath != "spec.containers{trainer}" || !strings.Contains(ev.Message, "exit code 42") {
			t.Errorf("event %q on %q", ev.Message, ev.InvolvedObject.FieldPath)
		}
	}

	kubectl := filepath.Join(binDir, "kubectl")
	describe := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "describe", "pod", "agent-trainer")
	out, err := describe.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl describe: %v\n%s", err, out)
	}
	excerpt := string(out)
	if i := strings.Index(excerpt, "Events:"); i >= 0 {
		excerpt = excerpt[i:]
	}
	if !strings.Contains(excerpt, agentapi.ReasonRestarted) {
		t.Errorf("kubectl describe shows no %s Event:\n%s", agentapi.ReasonRestarted, excerpt)
	}
	t.Logf("kubectl describe pod agent-trainer (Events):\n%s", excerpt)

	status := exec.CommandContext(ctx, "go", "run", "./cmd/restart-injector", "status", "--kubeconfig", c.Kubeconfig, "-n", "default")
	status.Dir = repo
	out, err = status.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "agent-trainer") {
		t.Errorf("restart-injector status: %v\n%s", err, out)
	}
	t.Logf("restart-injector status -n default:\n%s", out)
}

// standInForAgent creates the node agent's namespace and, on the node, a
// pod of the agent's DaemonSet (a busybox sleeping, under the DaemonSet's
// label and namespace) for an agent the test runs in its own process:
// `restart-injector status` trusts an Event only from a node that runs an
// agent pod.
func standInForAgent(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager creates the namespace's default ServiceAccount,
	// which the ServiceAccount admission plugin needs.
	if _, err := c.Client.CoreV1().ServiceAccounts(agentapi.AgentNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stand := podSpec(corev1.RestartPolicyAlways, 1, shell("node-agent", "exec sleep 3600", nil))
	name, value, _ := strings.Cut(agentapi.AgentLabel, "=")
	if _, err := c.Client.CoreV1().Pods(agentapi.AgentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: agentapi.Component, Labels: map[string]string{name: value}}, Spec: stand}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grepLines keeps the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}
