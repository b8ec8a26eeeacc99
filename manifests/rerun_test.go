package manifests

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestRerunSameOnBothPaths: the webhook's patch and the offline inject
// write the same re-run sidecars, for every pod of rerun.yaml.
func TestRerunSameOnBothPaths(t *testing.T) {
	inj, _ := goldenInjector(t)
	src, err := os.ReadFile(filepath.Join(goldenDir, "in", "rerun.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := injectBytes(t, inj, src)
	m, err := ReadManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ReadManifests(src)
	if err != nil {
		t.Fatal(err)
	}
	input := map[string]*corev1.Pod{}
	for _, d := range pods.Docs {
		if d.Object == nil || d.Object["kind"] != "Pod" {
			continue
		}
		raw, _ := json.Marshal(d.Object)
		var p corev1.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		input[p.Name] = &p
	}
	checked := 0
	for _, d := range m.Docs {
		if d.Object == nil || d.Object["kind"] != "Pod" {
			continue
		}
		raw, _ := json.Marshal(d.Object)
		var offline corev1.Pod
		if err := json.Unmarshal(raw, &offline); err != nil {
			t.Fatal(err)
		}
		// The undo record is inject's alone (the webhook's patch is undone
		// by deleting the pod).
		delete(offline.Annotations, contract.AnnotationUndo)
		in, ok := input[offline.Name]
		if !ok {
			t.Fatalf("no pod %q in rerun.yaml", offline.Name)
		}
		res, err := inj.MutatePod(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(res.Pod, &offline) {
			a, _ := json.Marshal(res.Pod)
			t.Errorf("pod %s: webhook and inject differ:\n%s\n%s", offline.Name, a, raw)
		}
		checked++
	}
	if checked != 3 {
		t.Errorf("checked %d pods, want 3", checked)
	}
}
