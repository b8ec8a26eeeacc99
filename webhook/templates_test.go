package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

type fixedFields struct{ kept, known bool }

func (f fixedFields) FieldsKept() (bool, bool) { return f.kept, f.known }

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations:
        restart-supervisor.dev/rules: '{"sidecar":{"restartPolicy":"Always","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[3]}}]},"web":{"restartPolicy":"Never"}}'
    spec:
      initContainers:
      - {name: proxy, image: proxy:1, restartPolicy: Always}
      - {name: sidecar, image: side:1, command: [/side]}
      containers:
      - name: web
        image: web:1
        command: [/web]
        restartPolicy: Never
        restartPolicyRules:
        - {action: Restart, exitCodes: {operator: In, values: [42]}}
`

func workloadReview(t *testing.T, manifest string, kind metav1.GroupVersionKind, resource string) ([]byte, []byte) {
	t.Helper()
	raw, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "0f6e2a4c-7b1d-4e1e-9a52-5d0c1c3b9e11", Kind: kind,
			Resource:  metav1.GroupVersionResource{Group: kind.Group, Version: "v1", Resource: resource},
			Namespace: "shop", Name: "web", Operation: admissionv1.Create, Object: runtimeRaw(raw)},
	})
	return raw, b
}

var deploymentGVK = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

func TestTemplateRulesMovedToAnnotationWhenDropped(t *testing.T) {
	for _, fs := range []FieldState{nil, fixedFields{false, true}, fixedFields{true, false}} {
		h := newHandler()
		h.Fields = fs
		ts := startServer(t, h)
		raw, body := workloadReview(t, deploymentYAML, deploymentGVK, "deployments")
		resp := admit(t, ts, body)
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "rules of web were copied") {
			t.Fatalf("fields %v: %+v", fs, resp)
		}
		out, _ := applyPatch(t, raw, resp)
		var d struct {
			Spec struct {
				Template struct {
					Metadata struct{ Annotations map[string]string }
				}
			}
		}
		if err := json.Unmarshal(out, &d); err != nil {
			t.Fatal(err)
		}
		got := d.Spec.Template.Metadata.Annotations[contract.AnnotationRules]
		// The user's current fields replace the annotation's entry for web;
		// the entry for sidecar (annotation only) is kept.
		want := `{"sidecar":{"restartPolicy":"Always","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[3]}}]},"web":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}}`
		if got != want {
			t.Errorf("annotation\n got %s\nwant %s", got, want)
		}
		// Applied again (an update with the annotation in place): no patch.
		again := admit(t, ts, reviewWith(t, out, deploymentGVK, "deployments"))
		if len(again.Patch) != 0 {
			t.Errorf("second pass patched: %s", again.Patch)
		}
		ts.Stop(t)
	}
}

func reviewWith(t *testing.T, raw []byte, kind metav1.GroupVersionKind, resource string) []byte {
	b, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "0f6e2a4c-7b1d-4e1e-9a52-5d0c1c3b9e11", Kind: kind,
			Resource:  metav1.GroupVersionResource{Group: kind.Group, Version: "v1", Resource: resource},
			Namespace: "shop", Name: "web", Operation: admissionv1.Update, Object: runtimeRaw(raw)},
	})
	return b
}

func TestTemplateUntouchedWhenFieldsKept(t *testing.T) {
	h := newHandler()
	h.Fields = fixedFields{true, true}
	ts := startServer(t, h)
	_, body := workloadReview(t, deploymentYAML, deploymentGVK, "deployments")
	if resp := admit(t, ts, body); !resp.Allowed || resp.Patch != nil {
		t.Fatalf("%+v", resp)
	}
}

func TestCronJobTemplateWithoutMetadata(t *testing.T) {
	ts := startServer(t, newHandler())
	cron := `
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: job, image: job:1, command: [/job], restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: NotIn, values: [0]}}]}
`
	raw, body := workloadReview(t, cron, metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, "cronjobs")
	resp := admit(t, ts, body)
	out, _ := applyPatch(t, raw, resp)
	var obj map[string]any
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(obj, "spec", "jobTemplate", "spec", "template", "metadata", "annotations", contract.AnnotationRules)
	if !strings.HasPrefix(s, `{"job":{"restartPolicy":"Never"`) {
		t.Fatalf("patched: %s", out)
	}
}

func TestTemplateInvalidRulesDenied(t *testing.T) {
	ts := startServer(t, newHandler())
	_, body := workloadReview(t, strings.Replace(deploymentYAML, "operator: In, values: [42]", "operator: Between, values: [42]", 1), deploymentGVK, "deployments")
	resp := admit(t, ts, body)
	if resp.Allowed || resp.Result.Code != 422 || !strings.Contains(resp.Result.Message, `Deployment "shop/web": spec.template.spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Between"`) {
		t.Fatalf("%+v", resp.Result)
	}
}

// TestJobSetTemplatesCarryRules: a custom resource with several pod
// templates (JobSet's replicated jobs) gets the rules of each template
// copied into that template's annotation, so the Jobs and pods its
// controller makes carry them through an API server that drops the fields.
func TestJobSetTemplatesCarryRules(t *testing.T) {
	ts := startServer(t, newHandler())
	jobset := `
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train}
spec:
  replicatedJobs:
  - name: driver
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - {name: driver, image: d:1, command: [/d]}
  - name: workers
    template:
      spec:
        template:
          spec:
            restartPolicy: Never
            containers:
            - {name: worker, image: w:1, command: [/w], restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]}
`
	gvk := metav1.GroupVersionKind{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"}
	raw, body := workloadReview(t, jobset, gvk, "jobsets")
	resp := admit(t, ts, body)
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "spec.replicatedJobs[1].template.spec.template/worker") {
		t.Fatalf("%+v", resp)
	}
	out, _ := applyPatch(t, raw, resp)
	var obj map[string]any
	if err := json.Unmarshal(out, &obj); err != nil {
		t.Fatal(err)
	}
	jobs, _, _ := unstructured.NestedSlice(obj, "spec", "replicatedJobs")
	if len(jobs) != 2 {
		t.Fatalf("patched: %s", out)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(jobs[0].(map[string]any), "template", "spec", "template", "metadata"); found {
		t.Errorf("the driver's template, which has no rules, was changed: %s", out)
	}
	s, _, _ := unstructured.NestedString(jobs[1].(map[string]any), "template", "spec", "template", "metadata", "annotations", contract.AnnotationRules)
	if !strings.HasPrefix(s, `{"worker":{"restartPolicy":"Never"`) {
		t.Fatalf("patched: %s", out)
	}
}
