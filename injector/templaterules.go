package injector

import (
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// TemplateRules is the outcome of CarryTemplateRules.
type TemplateRules struct {
	// Patch sets the rules annotation of the pod template; its paths are
	// relative to the root of the object. Empty when nothing changes.
	Patch []PatchOp
	// Containers are the sorted names of the containers whose fields
	// were copied.
	Containers []string
}

// CarryTemplateRules copies the restart fields of the containers of obj's
// pod template (the Pod itself, for a Pod) into its
// restart-supervisor.dev/rules annotation. An API server without the
// ContainerRestartRules gate drops the fields from what it stores, the
// annotation survives, and the pods made from the template are then
// injected from it.
//
// The fields are what the user just wrote, so they replace an entry for
// the same container that an earlier copy left in the annotation; entries
// for other containers are kept. Kinds without a pod template, templates
// without such fields and templates whose annotation already holds the
// copy yield no patch. obj is not modified.
func CarryTemplateRules(obj *unstructured.Unstructured) (*TemplateRules, error) {
	ts, _, err := templatesOf(obj.Object, obj.GetAPIVersion(), obj.GetKind())
	object := ObjectName(obj.GetKind(), obj.GetNamespace(), obj.GetName(), obj.GetGenerateName())
	if err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	out := &TemplateRules{}
	for _, t := range ts {
		ops, moved, err := carryRules(t, object)
		if err != nil {
			return nil, err
		}
		out.Patch = append(out.Patch, PrefixOps(ops, pointer(t.path))...)
		for _, c := range moved {
			if len(ts) > 1 {
				c = t.label() + "/" + c
			}
			out.Containers = append(out.Containers, c)
		}
	}
	return out, nil
}

// carryRules is CarryTemplateRules for one template; the patch is
// relative to the template.
func carryRules(t podTemplate, object string) ([]PatchOp, []string, error) {
	pod, err := templatePod(t, object)
	if err != nil {
		return nil, nil, err
	}
	entries, err := parseRulesAnnotation(pod.Annotations)
	if err != nil {
		where := ""
		if t.path != nil {
			where = t.label() + "."
		}
		return nil, nil, fmt.Errorf("%s: %s%v", object, where, err)
	}
	// The fields alone: an earlier copy in the annotation may disagree
	// with them, which is what an update that changes the rules looks like.
	// Templates are carried only for API servers that drop the fields and
	// so never validate them: the newest release's validation applies, as
	// it does for the supervisor.
	crs, err := podRules(rules.NewestKube, pod, nil, t.specPath(), object)
	if err != nil {
		return nil, nil, err
	}
	if entries == nil {
		entries = map[string]carried{}
	}
	var moved []string
	for _, cr := range crs {
		if r, p := cr.gatedFields(); !r && !p {
			continue
		}
		// The limits an earlier copy carried stay: no field holds them.
		entry := entries[cr.Name]
		entry.Container = cr.Rules
		entries[cr.Name] = entry
		moved = append(moved, cr.Name)
	}
	if len(moved) == 0 {
		return nil, nil, nil
	}
	value, err := json.Marshal(entries) // map keys are sorted: the value is deterministic
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", object, err)
	}
	if pod.Annotations[contract.AnnotationRules] == string(value) {
		return nil, nil, nil
	}
	var p patchBuilder
	p.setAnnotation(&pod.ObjectMeta, contract.AnnotationRules, string(value))
	sort.Strings(moved)
	return p.ops, moved, nil
}
