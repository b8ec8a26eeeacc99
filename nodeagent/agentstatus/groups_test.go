package agentstatus

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

func groupObject(ns, key string, spec map[string]any) unstructured.Unstructured {
	spec["group"] = key
	return unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "restart-supervisor.dev/v1alpha1", "kind": "GroupRestart",
		"metadata": map[string]any{"name": agentapi.GroupObjectName(key), "namespace": ns},
		"spec":     spec,
	}}
}

// The group lines say each round's progress from what its coordinator
// wrote of the current generation only, the limit or none, and escape what a pod
// author controls (the pod and container names in the cause).
func TestGroupTable(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	items := []unstructured.Unstructured{
		groupObject("ml", "jobset.sigs.k8s.io/jobset-name=train", map[string]any{
			"generation": int64(3), "maxRestarts": int64(5),
			"cause":    map[string]any{"pod": "train-0", "container": "trainer", "exitCode": int64(42), "time": now.Add(-90 * time.Second).Format(time.RFC3339)},
			"released": int64(3), "done": int64(2), "members": int64(4),
		}),
		groupObject("ml", "batch.kubernetes.io/job-name=eval", map[string]any{"generation": int64(0)}),
		groupObject("ml", "restart-supervisor.dev/group=x", map[string]any{
			"generation": int64(1), "cause": map[string]any{"pod": "p\x1b[2J", "container": "c", "exitCode": int64(1)},
			"released": int64(1), "done": int64(1), "members": int64(1),
		}),
	}
	// The reports of the round under way, one of them of the last round.
	reports := map[string][]agentapi.NodeReport{"ml/" + agentapi.GroupObjectName("jobset.sigs.k8s.io/jobset-name=train"): {
		{Node: "a", Generation: 3, Members: 2, Stopped: 2, Started: 1},
		{Node: "b", Generation: 3, Members: 2, Stopped: 2, Started: 2},
		{Node: "c", Generation: 2, Members: 9, Stopped: 9, Started: 9},
	}}
	var b bytes.Buffer
	if err := (&StatusPrinter{Now: func() time.Time { return now }}).PrintGroups(&b, items, reports); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"GROUP", "RESTARTS", "LIMIT", "LAST", "CAUSE", "LAST", "ROUND"},
		{"batch.kubernetes.io/job-name=eval", "0", "none", "-", "-", "-"},
		{"jobset.sigs.k8s.io/jobset-name=train", "3", "5", "train-0/trainer", "exit", "42", "90s", "ago", "starting", "3/4"},
		{"restart-supervisor.dev/group=x", "1", "none", "p?[2J/c", "exit", "1", "-", "done"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
	// Only the table formats print groups.
	b.Reset()
	if err := (&StatusPrinter{Format: FormatJSON}).PrintGroups(&b, items, nil); err != nil || b.Len() != 0 {
		t.Errorf("-o json printed groups: %q, %v", b.String(), err)
	}
	// -o wide names the object, -A the namespace.
	b.Reset()
	if err := (&StatusPrinter{Format: FormatWide, AllNamespaces: true, Now: func() time.Time { return now }}).PrintGroups(&b, items[:1], nil); err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(strings.Split(b.String(), "\n")[1]); f[0] != "ml" || f[len(f)-1] != agentapi.GroupObjectName("jobset.sigs.k8s.io/jobset-name=train") {
		t.Errorf("wide, every namespace: %q", f)
	}
}
