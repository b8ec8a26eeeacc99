package injector

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
)

// Where pod templates live. A Pod is its own template; a Deployment has
// one at spec.template; the training and batch controllers users run
// (JobSet, Kubeflow, KubeRay, LeaderWorkerSet, Volcano) keep several, in
// lists and maps. The injector wraps the containers of every template, so
// the pods a controller makes from them run under the supervisor, and the
// webhook carries the rules of every template into its annotation.
//
// A path is a list of map keys; "*" stands for every element of a list
// or every value of a map, so one entry covers JobSet's replicatedJobs or
// a PyTorchJob's replica specs whatever their number or names.
var knownTemplates = map[schema.GroupKind][][]string{
	{Group: "", Kind: "Pod"}:                   {nil},
	{Group: "", Kind: "PodTemplate"}:           {{"template"}},
	{Group: "", Kind: "ReplicationController"}: {{"spec", "template"}},
	{Group: "apps", Kind: "Deployment"}:        {{"spec", "template"}},
	{Group: "apps", Kind: "StatefulSet"}:       {{"spec", "template"}},
	{Group: "apps", Kind: "DaemonSet"}:         {{"spec", "template"}},
	{Group: "apps", Kind: "ReplicaSet"}:        {{"spec", "template"}},
	{Group: "batch", Kind: "Job"}:              {{"spec", "template"}},
	{Group: "batch", Kind: "CronJob"}:          {{"spec", "jobTemplate", "spec", "template"}},

	// JobSet (jobset.x-k8s.io/v1alpha2): a Job template per replicated job.
	{Group: "jobset.x-k8s.io", Kind: "JobSet"}: {{"spec", "replicatedJobs", "*", "template", "spec", "template"}},
	// Kubeflow Trainer (trainer.kubeflow.org/v1alpha1): runtimes hold a
	// JobSet template; a TrainJob refers to a runtime and has none.
	{Group: "trainer.kubeflow.org", Kind: "TrainingRuntime"}:        {{"spec", "template", "spec", "replicatedJobs", "*", "template", "spec", "template"}},
	{Group: "trainer.kubeflow.org", Kind: "ClusterTrainingRuntime"}: {{"spec", "template", "spec", "replicatedJobs", "*", "template", "spec", "template"}},
	// Kubeflow training-operator (kubeflow.org/v1) and MPI operator
	// (kubeflow.org/v2beta1): a map of replica type to replica spec.
	{Group: "kubeflow.org", Kind: "PyTorchJob"}: {{"spec", "pytorchReplicaSpecs", "*", "template"}},
	{Group: "kubeflow.org", Kind: "TFJob"}:      {{"spec", "tfReplicaSpecs", "*", "template"}},
	{Group: "kubeflow.org", Kind: "MPIJob"}:     {{"spec", "mpiReplicaSpecs", "*", "template"}},
	{Group: "kubeflow.org", Kind: "XGBoostJob"}: {{"spec", "xgbReplicaSpecs", "*", "template"}},
	{Group: "kubeflow.org", Kind: "PaddleJob"}:  {{"spec", "paddleReplicaSpecs", "*", "template"}},
	{Group: "kubeflow.org", Kind: "JAXJob"}:     {{"spec", "jaxReplicaSpecs", "*", "template"}},
	// KubeRay (ray.io/v1).
	{Group: "ray.io", Kind: "RayCluster"}: {{"spec", "headGroupSpec", "template"}, {"spec", "workerGroupSpecs", "*", "template"}},
	{Group: "ray.io", Kind: "RayJob"}: {{"spec", "rayClusterSpec", "headGroupSpec", "template"},
		{"spec", "rayClusterSpec", "workerGroupSpecs", "*", "template"}, {"spec", "submitterPodTemplate"}},
	{Group: "ray.io", Kind: "RayService"}: {{"spec", "rayClusterConfig", "headGroupSpec", "template"},
		{"spec", "rayClusterConfig", "workerGroupSpecs", "*", "template"}},
	// LeaderWorkerSet (leaderworkerset.x-k8s.io/v1).
	{Group: "leaderworkerset.x-k8s.io", Kind: "LeaderWorkerSet"}: {{"spec", "leaderWorkerTemplate", "leaderTemplate"},
		{"spec", "leaderWorkerTemplate", "workerTemplate"}},
	// Volcano (batch.volcano.sh/v1alpha1): one template per task.
	{Group: "batch.volcano.sh", Kind: "Job"}: {{"spec", "tasks", "*", "template"}},
}

// builtinGroups are the API groups of Kubernetes itself: a kind of these
// groups missing from knownTemplates has no pod template, and is not
// searched for one.
var builtinGroups = map[string]bool{
	"": true, "apps": true, "batch": true, "autoscaling": true, "policy": true, "networking.k8s.io": true,
	"rbac.authorization.k8s.io": true, "storage.k8s.io": true, "scheduling.k8s.io": true, "node.k8s.io": true,
	"coordination.k8s.io": true, "discovery.k8s.io": true, "events.k8s.io": true, "apiextensions.k8s.io": true,
	"admissionregistration.k8s.io": true, "certificates.k8s.io": true, "flowcontrol.apiserver.k8s.io": true,
	"apiregistration.k8s.io": true, "resource.k8s.io": true, "storagemigration.k8s.io": true,
}

// maxSearchDepth bounds the search for pod templates in kinds the
// injector does not know. The deepest known template (a
// ClusterTrainingRuntime's) is 8 keys down; a template nested deeper than
// this is not found, and a document carrying rules there is reported.
const maxSearchDepth = 24

// podTemplate is one pod template of an object.
type podTemplate struct {
	// path leads from the object's root to the template: map keys, and
	// list indices in decimal. nil for a Pod.
	path []string
	m    map[string]any
	// derived is the pod policy the object's controller sets for the
	// pods of this template, nil where the template's own applies
	// (podpolicy.go).
	derived *derivedPolicy
	// budget is the restart budget the object's fields imply for the
	// template's containers, nil where none (ownerbudget.go).
	budget *ownerBudget
}

// label names the template in messages and reports, such as
// spec.replicatedJobs[0].template.spec.template.
func (t podTemplate) label() string { return yamledit.Dotted(t.path) }

// specPath is the API path of the template's pod spec, for messages.
func (t podTemplate) specPath() string {
	if t.path == nil {
		return "spec"
	}
	return t.label() + ".spec"
}

// HasPodTemplates reports whether objects of the kind may hold pod
// templates: the kinds the injector knows, and any kind outside
// Kubernetes' own API groups, which is searched for templates by shape.
func HasPodTemplates(apiVersion, kind string) bool {
	gk := groupKind(apiVersion, kind)
	if paths, ok := knownTemplates[gk]; ok {
		return len(paths) > 0
	}
	return !builtinGroups[gk.Group]
}

func groupKind(apiVersion, kind string) schema.GroupKind {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return schema.GroupKind{Group: gv.Group, Kind: kind}
}

// templatesOf returns the pod templates of obj in document order, and
// whether its kind is one the injector knows. For a kind it does not know
// (outside Kubernetes' own groups), it searches obj for maps shaped like a
// pod template: a "spec" holding a list of "containers". The object's root
// is never taken for a template of such a kind: its metadata is the
// custom resource's, not a pod's.
func templatesOf(obj map[string]any, apiVersion, kind string) (ts []podTemplate, known bool, err error) {
	gk := groupKind(apiVersion, kind)
	if paths, ok := knownTemplates[gk]; ok {
		for _, p := range paths {
			if p == nil {
				ts = append(ts, podTemplate{m: obj})
				continue
			}
			found, err := expand(obj, p, nil)
			if err != nil {
				return nil, true, err
			}
			for i := range found {
				found[i].derived, err = controllerPodPolicy(obj, apiVersion, kind, found[i].path)
				if err != nil {
					return nil, true, err
				}
				found[i].budget, err = ownerBudgetOf(obj, apiVersion, kind, found[i].path)
				if err != nil {
					return nil, true, err
				}
			}
			ts = append(ts, found...)
		}
		return ts, true, nil
	}
	if builtinGroups[gk.Group] {
		return nil, false, nil
	}
	searchTemplates(obj, nil, 0, &ts)
	return ts, false, nil
}

// expand follows pattern from v, which path reached.
func expand(v any, pattern, path []string) ([]podTemplate, error) {
	if len(pattern) == 0 {
		m, ok := v.(map[string]any)
		if !ok {
			if v == nil {
				return nil, nil // an explicit null: no template
			}
			return nil, fmt.Errorf("%s: want an object", yamledit.Dotted(path))
		}
		return []podTemplate{{path: append([]string(nil), path...), m: m}}, nil
	}
	key, rest := pattern[0], pattern[1:]
	switch t := v.(type) {
	case map[string]any:
		if key != "*" {
			next, ok := t[key]
			if !ok {
				return nil, nil
			}
			return expand(next, rest, append(path, key))
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys) // a map's order is not the document's; be deterministic
		var out []podTemplate
		for _, k := range keys {
			found, err := expand(t[k], rest, append(path, k))
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
		return out, nil
	case []any:
		if key != "*" {
			return nil, fmt.Errorf("%s: want an object", yamledit.Dotted(path))
		}
		var out []podTemplate
		for i, e := range t {
			found, err := expand(e, rest, append(path, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
		return out, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("%s: want an object", yamledit.Dotted(path))
}

// searchTemplates appends the maps below v shaped like a pod template.
// A template's own content is not searched further.
func searchTemplates(v any, path []string, depth int, out *[]podTemplate) {
	if depth > maxSearchDepth {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		if path != nil && looksLikeTemplate(t) {
			*out = append(*out, podTemplate{path: append([]string(nil), path...), m: t})
			return
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			searchTemplates(t[k], append(path, k), depth+1, out)
		}
	case []any:
		for i, e := range t {
			searchTemplates(e, append(path, strconv.Itoa(i)), depth+1, out)
		}
	}
}

// looksLikeTemplate: a pod template has a spec with a list of containers.
func looksLikeTemplate(m map[string]any) bool {
	spec, ok := m["spec"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = spec["containers"].([]any)
	return ok
}

// carriesRules reports whether v holds restart rules anywhere: a
// restartPolicyRules field or the rules annotation. A document that does
// and yields no template is reported, never passed over in silence.
func carriesRules(v any, depth int) bool {
	if depth > 2*maxSearchDepth {
		return false
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if k == "restartPolicyRules" || k == contract.AnnotationRules {
				return true
			}
			if carriesRules(e, depth+1) {
				return true
			}
		}
	case []any:
		for _, e := range t {
			if carriesRules(e, depth+1) {
				return true
			}
		}
	}
	return false
}

// Template is one pod template of an object: its JSON Pointer from the
// object's root ("" for a Pod) and the template as the object holds it.
type Template struct {
	Pointer string
	Object  map[string]any
}

// Templates lists the pod templates of obj that MutateObject wraps, in
// the same order.
func Templates(obj map[string]any) ([]Template, error) {
	u := &unstructured.Unstructured{Object: obj}
	ts, _, err := templatesOf(obj, u.GetAPIVersion(), u.GetKind())
	if err != nil {
		return nil, err
	}
	out := make([]Template, 0, len(ts))
	for _, t := range ts {
		out = append(out, Template{Pointer: pointer(t.path), Object: t.m})
	}
	return out, nil
}

// pointer renders a path as a JSON Pointer (RFC 6901).
func pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteString("/" + yamledit.EscapeToken(p))
	}
	return b.String()
}
