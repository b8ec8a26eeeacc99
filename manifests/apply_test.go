package manifests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kubeyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/injector"
)

// applyDeployment is a Deployment whose container has a readiness and a
// startup probe of handler (exec, httpGet, tcpSocket, grpc), a liveness
// probe, and restart rules.
func applyDeployment(handler string) string {
	h := map[string]string{
		"exec":      "exec: {command: [cat, /ready]}",
		"httpGet":   "httpGet: {path: /healthz, port: 8080}",
		"tcpSocket": "tcpSocket: {port: 8080}",
		"grpc":      "grpc: {port: 8080}",
	}[handler]
	return `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.test/web:1
        command: [/web]
        ports: [{containerPort: 8080}]
        restartPolicy: Never
        restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
        readinessProbe: {` + h + `, periodSeconds: 5}
        startupProbe: {` + h + `, initialDelaySeconds: 3}
        livenessProbe: {` + h + `}
`
}

// handlers lists the handler kinds a probe sets.
func handlers(p *corev1.Probe) []string {
	if p == nil {
		return nil
	}
	var hs []string
	if p.Exec != nil {
		hs = append(hs, "exec "+strings.Join(p.Exec.Command, " "))
	}
	if p.HTTPGet != nil {
		hs = append(hs, "httpGet")
	}
	if p.TCPSocket != nil {
		hs = append(hs, "tcpSocket")
	}
	if p.GRPC != nil {
		hs = append(hs, "grpc")
	}
	return hs
}

// TestApplyRoundTrip: `kubectl get -o yaml | restart-injector inject -f - |
// kubectl apply -f -` computes its patch with strategicpatch's three-way
// merge (k8s.io/kubectl/pkg/cmd/apply/patcher.go), from the live object's
// last-applied configuration (none when it was created without apply),
// the injected manifest and the live object. The object it leads to must
// be the injected one: one handler per probe (the API server refuses two),
// no liveness probe and no restart fields left on the container.
func TestApplyRoundTrip(t *testing.T) {
	inj := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:t"})
	meta, err := strategicpatch.NewPatchMetaFromStruct(&appsv1.Deployment{})
	if err != nil {
		t.Fatal(err)
	}
	for _, handler := range []string{"exec", "httpGet", "tcpSocket", "grpc"} {
		for _, created := range []string{"create", "apply"} {
			t.Run(handler+"/"+created, func(t *testing.T) {
				src := applyDeployment(handler)
				live, err := kubeyaml.YAMLToJSON([]byte(src))
				if err != nil {
					t.Fatal(err)
				}
				var original []byte // kubectl create leaves no last-applied configuration
				if created == "apply" {
					original = live
				}
				out, _ := injectBytes(t, inj, []byte(src))
				modified, err := kubeyaml.YAMLToJSON(out)
				if err != nil {
					t.Fatal(err)
				}
				patch, err := strategicpatch.CreateThreeWayMergePatch(original, modified, live, meta, true)
				if err != nil {
					t.Fatal(err)
				}
				result, err := strategicpatch.StrategicMergePatch(live, patch, &appsv1.Deployment{})
				if err != nil {
					t.Fatal(err)
				}
				var d appsv1.Deployment
				if err := json.Unmarshal(result, &d); err != nil {
					t.Fatal(err)
				}
				c := d.Spec.Template.Spec.Containers[0]
				got := fmt.Sprintf("readiness %v, startup %v, liveness %v, restartPolicy %v, rules %d",
					handlers(c.ReadinessProbe), handlers(c.StartupProbe), handlers(c.LivenessProbe), c.RestartPolicy != nil, len(c.RestartPolicyRules))
				want := "readiness [exec /opt/restart-supervisor/restart-probe ready], startup [exec /opt/restart-supervisor/restart-probe started], liveness [], restartPolicy false, rules 0"
				if created == "create" {
					// Known and documented: restartPolicyRules cannot be
					// given as null (an API server before 1.34 refuses the
					// field under kubectl's strict validation), so with no
					// last-applied configuration the live restart fields
					// stay; the kubelet then decides the exits the
					// supervisor hands over by the same rules.
					want = strings.Replace(want, "restartPolicy false, rules 0", "restartPolicy true, rules 1", 1)
				}
				if c.StartupProbe != nil && c.StartupProbe.InitialDelaySeconds != 0 {
					t.Errorf("the live startup probe's initialDelaySeconds %d stayed", c.StartupProbe.InitialDelaySeconds)
				}
				if got != want {
					t.Errorf("after apply:\n got %s\nwant %s\npatch %s", got, want, patch)
				}
			})
		}
	}
}
