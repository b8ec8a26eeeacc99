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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

func TestGroupOf(t *testing.T) {
	for _, c := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"batch.kubernetes.io/job-name": "j", contract.LabelGroup: "mine"}, contract.LabelGroup + "=mine"},
		{map[string]string{"batch.kubernetes.io/job-name": "j", "jobset.sigs.k8s.io/jobset-name": "js"}, "jobset.sigs.k8s.io/jobset-name=js"},
		{map[string]string{"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/group-index": "2"},
			"leaderworkerset.sigs.k8s.io/group-index=2,leaderworkerset.sigs.k8s.io/name=l"},
		// Half of LeaderWorkerSet's pair is no group of it.
		{map[string]string{"leaderworkerset.sigs.k8s.io/name": "l"}, ""},
		{map[string]string{"training.kubeflow.org/job-name": "pt"}, "training.kubeflow.org/job-name=pt"},
		{map[string]string{"ray.io/cluster": "rc"}, "ray.io/cluster=rc"},
		{map[string]string{"batch.kubernetes.io/job-name": "j"}, "batch.kubernetes.io/job-name=j"},
		{map[string]string{contract.LabelGroup: ""}, ""},
		{nil, ""},
	} {
		key, sel, ok := GroupOf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: c.labels}})
		if key != c.want || ok != (c.want != "") || ok && sel.String() != key {
			t.Errorf("GroupOf(%v) = %q, %v, %v; want %q", c.labels, key, sel, ok, c.want)
		}
	}
}

func TestGroupMember(t *testing.T) {
	pod := func(env string, deleting bool, phase corev1.PodPhase) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{contract.LabelGroup: "g"}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Env: []corev1.EnvVar{{Name: contract.EnvConfig, Value: env}}}}},
			Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	group := `{"restartPolicyRules":[{"action":"RestartGroup"}]}`
	if !groupMember(pod(group, false, corev1.PodRunning)) {
		t.Error("a running pod with a RestartGroup rule is a member")
	}
	if groupMember(pod(`{"restartPolicyRules":[{"action":"Restart"}]}`, false, corev1.PodRunning)) {
		t.Error("a pod without RestartGroup is no member")
	}
	if groupMember(pod(group, true, corev1.PodRunning)) {
		t.Error("a pod being deleted takes no group restart (KEP-4438)")
	}
	if groupMember(pod(group, false, corev1.PodSucceeded)) {
		t.Error("a finished pod is no member")
	}
}

func TestAllStopped(t *testing.T) {
	st := groupState{generation: 2, nodes: map[string]nodeReport{
		"a": {Generation: 2, Members: 2, Stopped: 2},
		"b": {Generation: 1, Members: 2, Stopped: 2},
	}}
	if allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("node b's report is of the last generation")
	}
	st.nodes["b"] = nodeReport{Generation: 2, Members: 2, Stopped: 1}
	if allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("one of b's members still runs")
	}
	st.nodes["b"] = nodeReport{Generation: 2, Members: 2, Stopped: 2}
	if !allStopped(st, map[string]int{"a": 2, "b": 2}) {
		t.Error("every member stopped")
	}
	if allStopped(st, map[string]int{"a": 2, "b": 2, "c": 1}) {
		t.Error("node c has not reported")
	}
}

func TestRoundOver(t *testing.T) {
	now := time.Now()
	st := groupState{generation: 2, causeTime: now.Add(-time.Second), nodes: map[string]nodeReport{
		"a": {Generation: 2, Members: 2, Stopped: 2, Started: 2},
		"b": {Generation: 2, Members: 2, Stopped: 2, Started: 1},
	}}
	if roundOver(st, now) {
		t.Error("node b's members have not all started again")
	}
	if !roundOver(st, now.Add(GroupStopWait+2*time.Second)) {
		t.Error("past GroupStopWait the agents release anyway")
	}
	st.nodes["b"] = nodeReport{Generation: 2, Members: 2, Stopped: 2, Started: 2}
	if !roundOver(st, now) {
		t.Error("every node reported all started again")
	}
	st.nodes = map[string]nodeReport{"a": {Generation: 1, Members: 2, Stopped: 2}}
	if roundOver(st, now) {
		t.Error("no report of the current generation yet")
	}
	if !roundOver(groupState{}, now) {
		t.Error("generation 0 has no round")
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
		"apiVersion": GroupResource.GroupVersion().String(), "kind": GroupKind,
		"metadata": map[string]any{"name": GroupObjectName(key), "namespace": "default"},
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
