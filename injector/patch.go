package injector

import (
	"encoding/json"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// The JSON patch, the mutation's only output, and the pod it makes.

// patchedPod is pod with ops applied, a new object that shares nothing with
// pod. The patch is the mutation's only record of its edits, so the mutated
// pod is derived from it rather than edited alongside.
func patchedPod(pod *corev1.Pod, ops []PatchOp) (*corev1.Pod, error) {
	if len(ops) == 0 {
		return pod.DeepCopy(), nil
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	if raw, err = ApplyPatchJSON(raw, ops); err != nil {
		return nil, err
	}
	out := &corev1.Pod{}
	if err := json.Unmarshal(raw, out); err != nil {
		return nil, err
	}
	return out, nil
}

type patchBuilder struct{ ops []PatchOp }

func (p *patchBuilder) add(path string, v any) {
	p.ops = append(p.ops, PatchOp{Op: "add", Path: path, Value: v})
}

func (p *patchBuilder) remove(path string) {
	p.ops = append(p.ops, PatchOp{Op: "remove", Path: path})
}

// setAnnotation records setting annotation key to value on the object
// whose metadata is meta. Pod templates may have no metadata or no
// annotations at all, and an "add" below a missing member fails.
func (p *patchBuilder) setAnnotation(meta *metav1.ObjectMeta, key, value string) {
	p.setAnnotations(meta, [2]string{key, value})
}

// setAnnotations records setting each key to its value, in one op when
// the object has no annotations yet.
func (p *patchBuilder) setAnnotations(meta *metav1.ObjectMeta, kv ...[2]string) {
	all := map[string]string{}
	for _, e := range kv {
		all[e[0]] = e[1]
	}
	switch {
	case reflect.DeepEqual(*meta, metav1.ObjectMeta{}):
		p.add("/metadata", map[string]any{"annotations": all})
	case len(meta.Annotations) == 0:
		p.add("/metadata/annotations", all)
	default:
		for _, e := range kv {
			p.add("/metadata/annotations/"+yamledit.EscapeToken(e[0]), e[1])
		}
	}
}

// addToArray appends items to the array at path, creating it when the
// input has none (an "add .../-" on a missing array fails).
func addToArray[T any](p *patchBuilder, path string, existing int, items ...T) {
	if existing == 0 {
		p.add(path, items)
		return
	}
	for _, it := range items {
		p.add(path+"/-", it)
	}
}
