package injector

import (
	"encoding/json"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
	pod, specPath, object, ok, err := podOf(obj)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &TemplateRules{}, nil
	}
	path, _ := TemplatePath(obj.GetAPIVersion(), obj.GetKind())
	carried, err := parseRulesAnnotation(pod.Annotations)
	if err != nil {
		where := ""
		if path != nil {
			where = dotted(path) + "."
		}
		return nil, fmt.Errorf("%s: %s%v", object, where, err)
	}
	// The fields alone: an earlier copy in the annotation may disagree
	// with them, which is what an update that changes the rules looks like.
	// Templates are carried only for API servers that drop the fields and
	// so never validate them: the newest release's validation applies, as
	// it does for the supervisor.
	crs, err := podRules(rules.NewestKube, pod, nil, specPath, object)
	if err != nil {
		return nil, err
	}
	if carried == nil {
		carried = map[string]rules.Container{}
	}
	var moved []string
	for _, cr := range crs {
		if r, p := cr.gatedFields(); !r && !p {
			continue
		}
		carried[cr.Name] = cr.Rules
		moved = append(moved, cr.Name)
	}
	if len(moved) == 0 {
		return &TemplateRules{}, nil
	}
	value, err := json.Marshal(carried) // map keys are sorted: the value is deterministic
	if err != nil {
		return nil, fmt.Errorf("%s: %v", object, err)
	}
	if pod.Annotations[AnnotationRules] == string(value) {
		return &TemplateRules{}, nil
	}
	var p patchBuilder
	p.setAnnotation(&pod.ObjectMeta, AnnotationRules, string(value))
	sort.Strings(moved)
	return &TemplateRules{Patch: docOps(p.ops, "", path), Containers: moved}, nil
}
