package injector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/restart-supervisor/restart-supervisor/internal/oneline"
)

// ObjectResult is the outcome of MutateObject.
type ObjectResult struct {
	Result
	// Object is the mutated copy; the input itself when nothing changed.
	Object *unstructured.Unstructured
	// Templates are the labels of the pod templates found, such as
	// spec.template or spec.replicatedJobs[1].template.spec.template
	// ("" for a Pod), in the order Containers and Patch follow.
	Templates []string
	// Skipped says why an object that carries restart rules was not
	// injected; empty otherwise.
	Skipped string
}

// MutateObject is PodPatch for a Pod or for every pod template of a
// workload, custom resources included (see knownTemplates), with the
// patch applied to the generic form of the object, so that fields this
// build of k8s.io/api does not know survive. Result.Patch is relative to
// the object's root; Result.Pod is left nil. Containers of a workload
// with several templates are named TEMPLATE/CONTAINER. obj is not
// modified.
func (i *Injector) MutateObject(ctx context.Context, obj *unstructured.Unstructured) (*ObjectResult, error) {
	return i.mutateObject(ctx, obj, true)
}

// ObjectPatch is MutateObject without applying the patch to the object:
// the manifest writer (package manifests) applies it to the document's
// text instead, so that the user's layout and comments stay.
func (i *Injector) ObjectPatch(ctx context.Context, obj *unstructured.Unstructured) (*ObjectResult, error) {
	return i.mutateObject(ctx, obj, false)
}

// mutateObject applies the patch to the object only when apply is set; the
// manifest writer applies it to the document text instead.
func (i *Injector) mutateObject(ctx context.Context, obj *unstructured.Unstructured, apply bool) (*ObjectResult, error) {
	ts, known, err := templatesOf(obj.Object, obj.GetAPIVersion(), obj.GetKind())
	object := ObjectName(obj.GetKind(), obj.GetNamespace(), obj.GetName(), obj.GetGenerateName())
	if err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	out := &ObjectResult{Object: obj}
	for _, t := range ts {
		out.Templates = append(out.Templates, t.label())
		pod, err := templatePod(t, object)
		if err != nil {
			return nil, err
		}
		res, err := i.mutate(ctx, pod, obj.GetNamespace(), t.specPath(), object, t.budget)
		if err != nil {
			return nil, err
		}
		out.Injected = out.Injected || res.Injected
		if w := policyWarning(t, object); w != "" && res.Injected {
			out.Warnings = append(out.Warnings, w)
		}
		out.Warnings = append(out.Warnings, res.Warnings...)
		for _, c := range res.Containers {
			if len(ts) > 1 {
				c = t.label() + "/" + c
			}
			out.Containers = append(out.Containers, c)
		}
		out.Patch = append(out.Patch, PrefixOps(res.Patch, pointer(t.path))...)
	}
	if len(out.Containers) == 0 && carriesRules(obj.Object, 0) {
		switch {
		case len(ts) > 0:
			// Templates without rules of their own; the rules are
			// elsewhere in the object, where no pod will carry them.
			out.Skipped = "it carries restart rules outside its pod templates (" + strings.Join(out.Templates, ", ") + ")"
		case known:
			out.Skipped = "it carries restart rules but has no pod template"
		default:
			out.Skipped = "it carries restart rules but no pod template was found in it (a map with spec.containers)"
		}
	}
	if len(out.Patch) == 0 || !apply {
		return out, nil
	}
	patched, err := ApplyPatch(obj.Object, out.Patch)
	if err != nil {
		return nil, fmt.Errorf("%s: applying the injection patch: %v", object, err)
	}
	out.Object = &unstructured.Unstructured{Object: patched}
	return out, nil
}

// ApplyPatch applies ops to a JSON-like document and returns the result
// as a new document; doc is not modified.
func ApplyPatch(doc map[string]any, ops []PatchOp) (map[string]any, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	raw, err = ApplyPatchJSON(raw, ops)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ApplyPatchJSON applies ops to a JSON document with the RFC 6902 implementation
// the Kubernetes libraries use.
func ApplyPatchJSON(raw []byte, ops []PatchOp) ([]byte, error) {
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

// templatePod converts a pod template to a Pod, named object in messages.
func templatePod(t podTemplate, object string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(t.m, pod); err != nil {
		where := "pod"
		if t.path != nil {
			where = t.label()
		}
		return nil, fmt.Errorf("%s: %s: %s", object, where, oneline.Error(err))
	}
	if t.derived != nil {
		pod.Spec.RestartPolicy = corev1.RestartPolicy(t.derived.policy)
	}
	return pod, nil
}

// policyWarning says that the controller replaces the template's own pod
// policy, which the manifest's author may think in force; empty when the
// template has none or the same.
func policyWarning(t podTemplate, object string) string {
	if t.derived == nil {
		return ""
	}
	own, _ := lookup(t.m, []string{"spec", "restartPolicy"}).(string)
	if own == "" || own == string(t.derived.policy) {
		return ""
	}
	return fmt.Sprintf("%s: %s.restartPolicy %q is not what its pods get: %s (%s)", object, t.specPath(), clip(own), t.derived.policy, t.derived.from)
}

// PrefixOps rebases a patch onto prefix, a JSON Pointer.
func PrefixOps(ops []PatchOp, prefix string) []PatchOp {
	if prefix == "" {
		return ops
	}
	out := make([]PatchOp, len(ops))
	for i, op := range ops {
		op.Path = prefix + op.Path
		out[i] = op
	}
	return out
}

func IsList(obj *unstructured.Unstructured) bool {
	return strings.HasSuffix(obj.GetKind(), "List")
}
