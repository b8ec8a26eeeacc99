package manifests

import (
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
)

// TestNamespacedTemplateWithoutMetadata: a pod template without metadata
// gets the whole member, also when its workload has a namespace, which
// the template uses for pull secrets but does not carry.
func TestNamespacedTemplateWithoutMetadata(t *testing.T) {
	out, reports := injectBytes(t, injector.New(injector.Options{}), []byte(`apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly, namespace: shop}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: job, image: job:1, command: [/job], restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: NotIn, values: [0]}}]}
`))
	if len(reports) != 1 || !reports[0].Injected || !strings.Contains(string(out), contract.AnnotationStatus) {
		t.Errorf("%+v\n%s", reports, out)
	}
}
