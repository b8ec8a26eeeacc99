package injector

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// ObjectResult is the outcome of MutateObject.
type ObjectResult struct {
	Result
	// Object is the mutated copy; the input itself when nothing changed.
	Object *unstructured.Unstructured
	// TemplatePath locates the pod template whose root Patch is relative
	// to (nil for a Pod).
	TemplatePath []string
}

// TemplatePath returns where the pod template of a workload kind lives, and
// false for kinds that carry none (they pass through untouched).
func TemplatePath(apiVersion, kind string) ([]string, bool) {
	switch apiVersion + " " + kind {
	case "v1 Pod":
		return nil, true
	case "apps/v1 Deployment", "apps/v1 StatefulSet", "apps/v1 DaemonSet", "apps/v1 ReplicaSet", "batch/v1 Job":
		return []string{"spec", "template"}, true
	case "batch/v1 CronJob":
		return []string{"spec", "jobTemplate", "spec", "template"}, true
	}
	return nil, false
}

// MutateObject is PodPatch for a Pod or the pod template of a workload,
// with the patch applied to the generic form of the object, so that fields
// this build of k8s.io/api does not know survive. Result.Pod is left nil.
// obj is not modified.
func (i *Injector) MutateObject(ctx context.Context, obj *unstructured.Unstructured) (*ObjectResult, error) {
	return i.mutateObject(ctx, obj, true)
}

// mutateObject applies the patch to the object only when apply is set; the
// manifest writer applies it to the document text instead.
func (i *Injector) mutateObject(ctx context.Context, obj *unstructured.Unstructured, apply bool) (*ObjectResult, error) {
	path, _ := TemplatePath(obj.GetAPIVersion(), obj.GetKind())
	pod, specPath, object, ok, err := podOf(obj)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &ObjectResult{Object: obj, TemplatePath: path}, nil
	}
	res, err := i.mutate(ctx, pod, obj.GetNamespace(), specPath, object)
	if err != nil {
		return nil, err
	}
	out := &ObjectResult{Result: *res, Object: obj, TemplatePath: path}
	if len(res.Patch) == 0 || !apply {
		return out, nil
	}
	tmpl := obj.Object
	if path != nil {
		t, _, _ := unstructured.NestedFieldNoCopy(obj.Object, path...)
		tmpl = t.(map[string]any) // podOf checked
	}
	patched, err := ApplyPatch(tmpl, res.Patch)
	if err != nil {
		return nil, fmt.Errorf("%s: applying the injection patch: %v", object, err)
	}
	if path == nil {
		out.Object = &unstructured.Unstructured{Object: patched}
		return out, nil
	}
	cp := obj.DeepCopy()
	if err := unstructured.SetNestedMap(cp.Object, patched, path...); err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	out.Object = cp
	return out, nil
}

// ApplyPatch applies ops to a JSON-like document and returns the result
// as a new document; doc is not modified.
func ApplyPatch(doc map[string]any, ops []PatchOp) (map[string]any, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	raw, err = applyOps(raw, ops)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// applyOps applies ops to a JSON document with the RFC 6902 implementation
// the Kubernetes libraries use.
func applyOps(raw []byte, ops []PatchOp) ([]byte, error) {
	opsJSON, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.DecodePatch(opsJSON)
	if err != nil {
		return nil, err
	}
	return patch.Apply(raw)
}

// podOf returns the Pod, or the pod template of a workload as a Pod, with
// the API path of its spec and a name for messages. ok is false for kinds
// without a pod template and for workloads whose template is missing.
func podOf(obj *unstructured.Unstructured) (pod *corev1.Pod, specPath, object string, ok bool, err error) {
	path, known := TemplatePath(obj.GetAPIVersion(), obj.GetKind())
	if !known {
		return nil, "", "", false, nil
	}
	object = objectName(obj.GetKind(), obj.GetNamespace(), obj.GetName(), obj.GetGenerateName())
	tmpl := obj.Object
	specPath = "spec"
	if path != nil {
		t, found, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
		if err != nil {
			return nil, "", "", false, fmt.Errorf("%s: %s: %v", object, dotted(path), err)
		}
		if !found {
			return nil, "", "", false, nil
		}
		m, isMap := t.(map[string]any)
		if !isMap {
			return nil, "", "", false, fmt.Errorf("%s: %s: want an object", object, dotted(path))
		}
		tmpl = m
		specPath = dotted(path) + ".spec"
	}
	pod = &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, pod); err != nil {
		return nil, "", "", false, fmt.Errorf("%s: %s: %s", object, specPathParent(specPath), oneLine(err))
	}
	return pod, specPath, object, true, nil
}

func dotted(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}

func specPathParent(specPath string) string {
	if specPath == "spec" {
		return "pod"
	}
	return specPath[:len(specPath)-len(".spec")]
}
