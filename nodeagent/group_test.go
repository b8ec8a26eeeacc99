package nodeagent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

func TestAllStopped(t *testing.T) {
	st := agentapi.GroupState{Generation: 2, Nodes: map[string]agentapi.NodeReport{
		"a": {Generation: 2, Members: 2, Stopped: 2},
		"b": {Generation: 1, Members: 2, Stopped: 2},
	}}
	if allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("node b's report is of the last generation")
	}
	st.Nodes["b"] = agentapi.NodeReport{Generation: 2, Members: 2, Stopped: 1}
	if allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("one of b's members still runs")
	}
	st.Nodes["b"] = agentapi.NodeReport{Generation: 2, Members: 2, Stopped: 2}
	if !allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("every member stopped")
	}
	if allStopped(st, map[string]int{"a": 2, "b": 2, "c": 1}) {
		t.Error("node c has not reported")
	}
}

// A member whose own volume keeps the delivery failing (here pod-restarts/
// is a link) is tried again at every step, and said once a round in the
// agent's log, not once a step: one pod cannot flood the node's log.
func TestFailedDeliveryIsLoggedOncePerRound(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "pod-restarts")); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := newAgent(Config{NodeName: "n", Limits: DefaultLimits, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Client: kubefake.NewClientset()}, time.Now())
	key := contract.LabelGroup + "=g"
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentapi.GroupResource.GroupVersion().String(), "kind": agentapi.GroupKind,
		"metadata": map[string]any{"name": agentapi.GroupObjectName(key), "namespace": "default"},
		"spec": map[string]any{"group": key, "generation": int64(1),
			"cause": map[string]any{"pod": "p", "container": "c", "exitCode": int64(42)}},
	}}
	objects := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := objects.Add(obj); err != nil {
		t.Fatal(err)
	}
	g := &groups{a: a, client: dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme(), obj), objects: objects,
		rounds: map[string]*groupRound{}, handled: map[string]string{}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1", Labels: map[string]string{contract.LabelGroup: "g"}}}
	for i := 0; i < 10; i++ {
		g.carryOut(context.Background(), []localMember{{pod: pod, key: key, dir: dir, fd: -1}})
	}
	if n := strings.Count(logs.String(), "deliver group restart"); n != 1 {
		t.Fatalf("10 steps of a failing delivery logged %d times, want 1:\n%s", n, logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "pod-restarts", "00000000000000000001")); err == nil {
		t.Fatal("delivered through the link")
	}
}
