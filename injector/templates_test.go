package injector

import (
	"context"
	"testing"
)

// TestLinuxOrEitherOSIsInjected: a pod that may land on Linux nodes (an
// affinity term that allows linux, or no OS constraint) is injected; only
// pods bound to Windows are refused.
func TestLinuxOrEitherOSIsInjected(t *testing.T) {
	for name, pod := range map[string]string{
		"linux selector": `
metadata: {name: p}
spec:
  nodeSelector: {kubernetes.io/os: linux}
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
		"one term allows linux": `
metadata: {name: p}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [windows]}]
        - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
		"either OS in one term": `
metadata: {name: p}
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [windows, linux]}]
  containers:
  - {name: app, command: [x], restartPolicy: Never}`,
	} {
		res, err := New(Options{}).MutatePod(context.Background(), podYAML(t, pod))
		if err != nil || !res.Injected {
			t.Errorf("%s: injected %v, err %v", name, res != nil && res.Injected, err)
		}
	}
}

// TestTemplatesOfBoundedSearch: the search for templates in an unknown
// kind stops at maxSearchDepth, so a deeply nested document costs bounded
// work; carriesRules still reports rules it cannot place.
func TestTemplatesOfBoundedSearch(t *testing.T) {
	var v any = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "restartPolicyRules": []any{}}}}}
	for range 2 * maxSearchDepth {
		v = map[string]any{"x": v}
	}
	obj := map[string]any{"apiVersion": "example.com/v1", "kind": "Deep", "spec": v}
	ts, known, err := templatesOf(obj, "example.com/v1", "Deep")
	if err != nil || known || len(ts) != 0 {
		t.Fatalf("templates %d, known %v, err %v", len(ts), known, err)
	}
	// Found when it is shallow enough.
	obj["spec"] = map[string]any{"x": map[string]any{"spec": map[string]any{"containers": []any{}}}}
	ts, _, _ = templatesOf(obj, "example.com/v1", "Deep")
	if len(ts) != 1 || ts[0].label() != "spec.x" {
		t.Fatalf("templates %+v", ts)
	}
}
