package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// FieldState reports whether the API server keeps restartPolicyRules in
// what it stores; known is false until it has been checked.
type FieldState interface {
	FieldsKept() (kept, known bool)
}

// isWorkload reports whether kind may hold pod templates (a kind the
// injector knows, or a custom resource the operator registered the
// webhook for): those are the workloads the webhook reviews.
func isWorkload(kind metav1.GroupVersionKind) bool {
	if kind.Group == "" && kind.Kind == "Pod" {
		return false
	}
	gv := schema.GroupVersion{Group: kind.Group, Version: kind.Version}
	return injector.HasPodTemplates(gv.String(), kind.Kind)
}

// reviewTemplate handles a workload. An API server that drops
// restartPolicyRules (gate off) drops them from a stored pod template too,
// before any pod exists, so the pods would reach the pod webhook without
// rules; injector.CarryTemplateRules copies them into the template's
// annotation first. When the API server keeps the fields, workloads are
// left alone.
func (h *Handler) reviewTemplate(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow(), ResultUntouched
	}
	if h.Fields != nil {
		if kept, known := h.Fields.FieldsKept(); known && kept {
			return allow(), ResultUntouched
		}
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(req.Object.Raw, &obj); err != nil {
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, "decode "+req.Kind.Kind+": "+err.Error()), ResultBadInput
	}
	u := &unstructured.Unstructured{Object: obj}
	// The request says what the object is, and in which namespace, even
	// where the object itself leaves that out.
	u.SetAPIVersion(schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String())
	u.SetKind(req.Kind.Kind)
	if u.GetNamespace() == "" && req.Namespace != "" {
		u.SetNamespace(req.Namespace)
	}
	res, err := injector.CarryTemplateRules(u)
	if err != nil {
		return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error()), ResultDenied
	}
	if len(res.Patch) == 0 {
		return allow(), ResultUntouched
	}
	patch, err := encodePatch(res.Patch, MaxPatchBytes)
	if errors.Is(err, errPatchTooLarge) {
		return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			fmt.Sprintf("%s: copying the restart rules into the pod templates would take a JSON patch of more than %d bytes: %v", req.Kind.Kind, MaxPatchBytes, err)), ResultDenied
	}
	if err != nil {
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "encode JSON patch: "+err.Error()), ResultDenied
	}
	return allowPatched(patch, []string{fmt.Sprintf(
		"this API server drops restartPolicyRules from pod templates (ContainerRestartRules off): the rules of %s were copied into the annotation %s, and pods are run under restart-supervisor",
		someNames(res.Containers, 8), contract.AnnotationRules)}), ResultInjected
}

// someNames lists the first n of names, and how many more there are: a
// warning is one short line whatever the object holds.
func someNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
