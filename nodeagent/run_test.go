package nodeagent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// TestRunAgainstFakeClients runs the whole agent (Run: the pod informer,
// the scans, the Events, the annotation, the key's publication, the group
// loop and /metrics) over a pods directory laid out as the kubelet's,
// against fake clients: a restart written into a pod's status document
// reaches the metric, a signed Event and the pod's annotation, and the
// agent's key is published. The real API server's version of this is
// test/apiserver's TestNodeAgent.
func TestRunAgainstFakeClients(t *testing.T) {
	dir := t.TempDir()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app"}}}}
	client := kubefake.NewClientset(pod)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{agentapi.GroupResource: "GroupRestartList"})
	state := filepath.Join(append([]string{dir, "uid-web"}, statePath...)...)
	if err := os.MkdirAll(state, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(restarts int) {
		t.Helper()
		s := statevol.Status{Container: "app", State: contract.PhaseRunning, Restarts: restarts, RestartsTotal: restarts}
		if restarts > 0 {
			s.LastRestart = &statevol.Exit{Code: 3, At: time.Now()}
		}
		if err := statevol.WriteStatus(state, s); err != nil {
			t.Fatal(err)
		}
	}
	write(0)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Client: client, Dynamic: dyn, Groups: true, NodeName: "n1", PodsDir: dir,
			Interval: 50 * time.Millisecond, GroupInterval: 50 * time.Millisecond, MetricsListen: "127.0.0.1:0",
			Annotate: true, AnnotateEvery: time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Ready: func(a net.Addr) { ready <- a }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not ready within 30 s")
	}
	write(1)
	eventually := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !f(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 20 s", what)
			}
		}
	}
	eventually("the restart's metric", func() bool {
		resp, err := http.Get("http://" + addr.String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `restart_supervisor_container_restarts_total{container="app",namespace="default",pod="web",uid="uid-web"} 1`)
	})
	eventually("the signed Event", func() bool {
		l, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range l.Items {
			if e.Reason == agentapi.ReasonRestarted && e.Annotations[contract.EventAnnotationSignature] != "" {
				return true
			}
		}
		return false
	})
	eventually("the annotation", func() bool {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Annotations[contract.AnnotationRestarts] == `{"app":1}`
	})
	eventually("the published key", func() bool {
		ok, _ := agentapi.AgentKeyPublished(ctx, client, agentapi.AgentNamespace, "n1")
		return ok
	})
}
