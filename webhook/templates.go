package webhook

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// FieldState reports whether the API server keeps restartPolicyRules in
// what it stores; known is false until it has been checked.
type FieldState interface {
	FieldsKept() (kept, known bool)
}

// templatePaths are the workloads whose pod template the webhook looks at,
// with the JSON path of the template.
var templatePaths = map[metav1.GroupVersionKind][]string{
	{Group: "apps", Version: "v1", Kind: "Deployment"}:  {"spec", "template"},
	{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:  {"spec", "template"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"}: {"spec", "template"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"}:   {"spec", "template"},
	{Group: "batch", Version: "v1", Kind: "Job"}:        {"spec", "template"},
	{Group: "batch", Version: "v1", Kind: "CronJob"}:    {"spec", "jobTemplate", "spec", "template"},
}

// reviewTemplate handles a workload. An API server that drops
// restartPolicyRules (gate off) drops them from a stored pod template too,
// before any pod exists, so the pods would reach the pod webhook without
// rules. Here, before that happens, the rules of every container that
// carries them are copied into the template's restart-supervisor.dev/rules
// annotation, which survives, and the pods are injected from it. When the
// API server keeps the fields, workloads are left alone.
func (h *Handler) reviewTemplate(req *admissionv1.AdmissionRequest, path []string) (*admissionv1.AdmissionResponse, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return &admissionv1.AdmissionResponse{Allowed: true}, ResultUntouched
	}
	if h.Fields != nil {
		if kept, known := h.Fields.FieldsKept(); known && kept {
			return &admissionv1.AdmissionResponse{Allowed: true}, ResultUntouched
		}
	}
	object := fmt.Sprintf("%s %q", strings.ToLower(req.Kind.Kind), req.Namespace+"/"+req.Name)
	var generic map[string]any
	if err := json.Unmarshal(req.Object.Raw, &generic); err != nil {
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, "decode "+req.Kind.Kind+": "+err.Error()), ResultBadInput
	}
	rawTmpl, ok := dig(generic, path)
	if !ok {
		return &admissionv1.AdmissionResponse{Allowed: true}, ResultUntouched
	}
	b, _ := json.Marshal(rawTmpl)
	var tmpl corev1.PodTemplateSpec
	if err := json.Unmarshal(b, &tmpl); err != nil {
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("decode %s: %s: %v", object, strings.Join(path, "."), err)), ResultBadInput
	}

	carried := map[string]any{}
	if v := tmpl.Annotations[injector.AnnotationRules]; v != "" {
		if err := yaml.Unmarshal([]byte(v), &carried); err != nil {
			return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
				fmt.Sprintf("%s: %s.metadata.annotations[%s]: %v", object, strings.Join(path, "."), injector.AnnotationRules, err)), ResultDenied
		}
	}
	var moved []string
	specPath := strings.Join(path, ".") + ".spec"
	for _, list := range []struct {
		field string
		cs    []corev1.Container
	}{{"initContainers", tmpl.Spec.InitContainers}, {"containers", tmpl.Spec.Containers}} {
		for i, c := range list.cs {
			sidecar := list.field == "initContainers" && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
			if len(c.RestartPolicyRules) == 0 && (c.RestartPolicy == nil || sidecar) {
				continue
			}
			entry := struct {
				RestartPolicy      *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
				RestartPolicyRules []corev1.ContainerRestartRule  `json:"restartPolicyRules,omitempty"`
			}{c.RestartPolicy, c.RestartPolicyRules}
			eb, _ := json.Marshal(entry)
			var rc rules.Container
			if err := json.Unmarshal(eb, &rc); err != nil {
				return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("%s: %s.%s[%d]: %v", object, specPath, list.field, i, err)), ResultDenied
			}
			if errs := rules.Validate(rc, fmt.Sprintf("%s.%s[%d]", specPath, list.field, i)); len(errs) > 0 {
				return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("%s: %v", object, errs)), ResultDenied
			}
			// The fields are what the user just wrote; an entry for the same
			// container in the annotation is the copy of an earlier version.
			carried[c.Name] = json.RawMessage(eb)
			moved = append(moved, c.Name)
		}
	}
	if len(moved) == 0 {
		return &admissionv1.AdmissionResponse{Allowed: true}, ResultUntouched
	}
	value, err := json.Marshal(carried)
	if err != nil {
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()), ResultDenied
	}
	if tmpl.Annotations[injector.AnnotationRules] == string(value) {
		return &admissionv1.AdmissionResponse{Allowed: true}, ResultUntouched
	}
	base := "/" + strings.Join(path, "/")
	var op injector.PatchOp
	meta, hasMeta := dig(generic, append(append([]string{}, path...), "metadata"))
	_, hasAnn := dig(generic, append(append([]string{}, path...), "metadata", "annotations"))
	switch {
	case !hasMeta || meta == nil:
		op = injector.PatchOp{Op: "add", Path: base + "/metadata", Value: map[string]any{"annotations": map[string]string{injector.AnnotationRules: string(value)}}}
	case !hasAnn:
		op = injector.PatchOp{Op: "add", Path: base + "/metadata/annotations", Value: map[string]string{injector.AnnotationRules: string(value)}}
	default:
		op = injector.PatchOp{Op: "add", Path: base + "/metadata/annotations/" + escapePointer(injector.AnnotationRules), Value: string(value)}
	}
	patch, err := json.Marshal([]injector.PatchOp{op})
	if err != nil {
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()), ResultDenied
	}
	sort.Strings(moved)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt, Warnings: []string{fmt.Sprintf(
		"this API server drops restartPolicyRules from pod templates (ContainerRestartRules off): the rules of %s were copied into the annotation %s, and pods are run under restart-supervisor",
		strings.Join(moved, ", "), injector.AnnotationRules)}}, ResultInjected
}

func dig(m map[string]any, path []string) (any, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// escapePointer escapes a JSON-pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
