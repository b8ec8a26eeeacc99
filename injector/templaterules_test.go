package injector

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

func objectYAML(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := kubeyaml.Unmarshal([]byte(s), &obj.Object); err != nil {
		t.Fatal(err)
	}
	return obj
}

// TestCarryTemplateRules: the fields of the containers that carry gated
// ones replace their entries in the annotation, other entries stay, and a
// second run on the result changes nothing.
func TestCarryTemplateRules(t *testing.T) {
	obj := objectYAML(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    metadata:
      annotations:
        restart-supervisor.dev/rules: |
          sidecar: {restartPolicy: Always, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [3]}}]}
          web: {restartPolicy: Never}
    spec:
      initContainers:
      - {name: proxy, image: proxy:1, restartPolicy: Always}
      - {name: sidecar, image: side:1, command: [/side]}
      containers:
      - name: web
        image: web:1
        restartPolicy: Never
        restartPolicyRules:
        - {action: Restart, exitCodes: {operator: In, values: [42]}}
      - {name: plain, image: plain:1}
`)
	before := obj.DeepCopy()
	res, err := CarryTemplateRules(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj, before) {
		t.Error("CarryTemplateRules modified its input")
	}
	if !reflect.DeepEqual(res.Containers, []string{"web"}) {
		t.Errorf("containers %v, want [web]", res.Containers)
	}
	want := []PatchOp{{Op: "add", Path: "/spec/template/metadata/annotations/restart-supervisor.dev~1rules",
		Value: `{"sidecar":{"restartPolicy":"Always","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[3]}}]},"web":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}}`}}
	if !reflect.DeepEqual(res.Patch, want) {
		t.Fatalf("patch\n got %+v\nwant %+v", res.Patch, want)
	}
	patched, err := ApplyPatch(obj.Object, res.Patch)
	if err != nil {
		t.Fatal(err)
	}
	again, err := CarryTemplateRules(&unstructured.Unstructured{Object: patched})
	if err != nil || len(again.Patch) != 0 {
		t.Errorf("second run: %+v, %v", again, err)
	}
}

// TestTemplateWithoutMetadata: a template without metadata gets the whole
// member, also in a namespaced workload.
func TestTemplateWithoutMetadata(t *testing.T) {
	res, err := CarryTemplateRules(objectYAML(t, `
apiVersion: batch/v1
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
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Patch) != 1 || res.Patch[0].Path != "/spec/jobTemplate/spec/template/metadata" {
		t.Errorf("%+v", res.Patch)
	}
}

func TestCarryTemplateRulesNothingToDo(t *testing.T) {
	for name, s := range map[string]string{
		"no template": `{apiVersion: v1, kind: ConfigMap, metadata: {name: c}, data: {a: b}}`,
		"no fields": `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d},
			spec: {template: {spec: {containers: [{name: a, image: a}], initContainers: [{name: s, image: s, restartPolicy: Always}]}}}}`,
		"template missing": `{apiVersion: batch/v1, kind: Job, metadata: {name: j}, spec: {}}`,
	} {
		res, err := CarryTemplateRules(objectYAML(t, s))
		if err != nil || len(res.Patch) != 0 || len(res.Containers) != 0 {
			t.Errorf("%s: %+v, %v", name, res, err)
		}
	}
}

func TestCarryTemplateRulesErrors(t *testing.T) {
	for name, c := range map[string]struct{ obj, want string }{
		"invalid rule": {`{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: s, namespace: db},
			spec: {template: {spec: {containers: [{name: a, image: a, restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: Between, values: [1]}}]}]}}}}`,
			`StatefulSet "db/s": spec.template.spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Between": supported values: "In", "NotIn"`},
		"bad annotation": {`{apiVersion: apps/v1, kind: Deployment, metadata: {name: d},
			spec: {template: {metadata: {annotations: {restart-supervisor.dev/rules: "a: {restartPolicyRule: []}"}}, spec: {containers: [{name: a, image: a}]}}}}`,
			`Deployment "d": spec.template.metadata.annotations[restart-supervisor.dev/rules]: line 1: unknown field "restartPolicyRule"`},
	} {
		_, err := CarryTemplateRules(objectYAML(t, c.obj))
		if err == nil || err.Error() != c.want {
			t.Errorf("%s:\n got %v\nwant %s", name, err, c.want)
		}
	}
}

// TestExplainInitContainerExitZero: an init container whose rule matches 0
// is initialized by exit 0, natively and under the supervisor; only its
// failures are restarted in place.
func TestExplainInitContainerExitZero(t *testing.T) {
	never := corev1.ContainerRestartPolicyNever
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways,
		InitContainers: []corev1.Container{{Name: "fetch", Image: "x", Command: []string{"fetch"}, RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{1}}}}}},
		Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	plans, _, err := Explain(pod, "spec", "Pod \"p\"", rules.NewestKube)
	if err != nil {
		t.Fatal(err)
	}
	o := plans[0].Outcomes
	if len(o) != 3 || o[0].Codes != "0" || o[0].Handling != rules.HandOver || o[0].Native != "initialized" ||
		o[1].Codes != "1" || o[2].Codes != "2-255" || o[2].Handling != rules.RestartInPlace {
		t.Fatalf("outcomes: %+v", o)
	}
}
