package injector

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// TestReadinessRule: `restart-probe ready` goes only where readiness can
// be read: a container's own readiness probe (replaced), or a pod that
// restarts always and has labels; the annotation overrides the rule.
func TestReadinessRule(t *testing.T) {
	const container = `
      - name: app
        image: registry.test/app:1
        command: [/app]
        restartPolicy: Never
        restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]`
	doc := func(kind, templateMeta, podPolicy, probe string) string {
		policy := ""
		if podPolicy != "" {
			policy = "\n      restartPolicy: " + podPolicy
		}
		return `apiVersion: ` + map[string]string{"Deployment": "apps/v1", "Job": "batch/v1"}[kind] + `
kind: ` + kind + `
metadata: {name: w}
spec:
  template:
    metadata: ` + templateMeta + `
    spec:` + policy + `
      containers:` + container + probe + "\n"
	}
	ownProbe := "\n        readinessProbe: {httpGet: {path: /r, port: 80}}"
	for _, tc := range []struct {
		name, doc string
		want      bool
	}{
		{"Deployment with labels", doc("Deployment", "{labels: {app: w}}", "", ""), true},
		{"Deployment without labels", doc("Deployment", "{}", "", ""), false},
		{"Job", doc("Job", "{labels: {app: w}}", "Never", ""), false},
		{"Job OnFailure", doc("Job", "{labels: {app: w}}", "OnFailure", ""), false},
		{"Job with its own readiness probe", doc("Job", "{}", "Never", ownProbe), true},
		{"Job with the annotation on", doc("Job", "{annotations: {"+contract.AnnotationReadiness+": \"on\"}}", "Never", ""), true},
		{"Deployment with the annotation off", doc("Deployment", "{labels: {app: w}, annotations: {"+contract.AnnotationReadiness+": \"off\"}}", "", ""), false},
		{"own probe and the annotation off", doc("Deployment", "{annotations: {"+contract.AnnotationReadiness+": \"off\"}}", "", ownProbe), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := New(Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: readDocs(t, []byte(tc.doc))[0]})
			if err != nil {
				t.Fatal(err)
			}
			got := false
			for _, op := range res.Patch {
				if strings.HasSuffix(op.Path, "/readinessProbe") {
					got = true
				}
			}
			if got != tc.want || !res.Injected {
				t.Errorf("readiness probe %v, want %v (injected %v)", got, tc.want, res.Injected)
			}
		})
	}
	obj := readDocs(t, []byte(doc("Deployment", "{annotations: {"+contract.AnnotationReadiness+": \"no\"}}", "", "")))[0]
	_, err := New(Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: obj})
	want := `Deployment "w": spec.template.metadata.annotations[restart-supervisor.dev/readiness]: Unsupported value: "no": supported values: "on", "off"`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}
