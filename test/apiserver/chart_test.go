package apiserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
)

// helmBinary returns a real helm, built from the Go module proxy by
// hack/helm.sh into ~/.cache/restart-supervisor (a cold build takes minutes
// on 2 cores, a warm one is a `helm version`). Outside CI a machine that
// cannot build it skips; in CI that is a failure.
func helmBinary(t testing.TB) string {
	t.Helper()
	bin, err := testutil.HelmBinary(repoRoot(t), os.Stderr)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("helm is required in CI: %v", err)
		}
		t.Skipf("no helm (%v)", err)
	}
	return bin
}

// helmRunner runs helm with its configuration, cache and data in a
// directory of the test's own, so nothing of the machine's helm setup (or
// of another test) takes part.
type helmRunner struct {
	bin  string
	home string
}

func newHelm(t *testing.T) helmRunner {
	return helmRunner{bin: helmBinary(t), home: t.TempDir()}
}

// run returns helm's standard output; a failure carries both outputs.
func (h helmRunner) run(args ...string) ([]byte, error) {
	stdout, stderr, err := h.run2(args...)
	if err != nil {
		return stdout, fmt.Errorf("%v\n%s%s", err, stdout, stderr)
	}
	return stdout, nil
}

// run2 returns helm's standard output and standard error apart. Without
// --kubeconfig, helm has no cluster to reach.
func (h helmRunner) run2(args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append(testutil.HelmEnv(h.home), "KUBECONFIG="+filepath.Join(h.home, "no-kubeconfig"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return o.Bytes(), e.Bytes(), fmt.Errorf("helm %s: %v", strings.Join(args, " "), err)
	}
	return o.Bytes(), e.Bytes(), nil
}

func chartDir(t testing.TB) string {
	return filepath.Join(repoRoot(t), "charts", "restart-injector")
}

// installVariant is one way deploy/ can be installed, and the values that
// make the chart install the same objects.
type installVariant struct {
	name string
	// selfManaged: deploy/self-managed instead of deploy/ (cert-manager).
	selfManaged bool
	components  []string
	// patches is appended to the kustomization: the edits deploy/'s
	// comments ask for by hand.
	patches string
	set     []string
}

// optInCustomPatch is what deploy/components/custom-workloads asks for
// with namespace-opt-in: the opt-in expression on its entry, /webhooks/2.
const optInCustomPatch = `patches:
- target: {kind: MutatingWebhookConfiguration, name: restart-injector}
  patch: |-
    - op: add
      path: /webhooks/2/namespaceSelector/matchExpressions/-
      value: {key: restart-supervisor.dev/inject, operator: In, values: [enabled]}
`

// installVariants is every variant and component deploy/ offers, alone on
// the variant they are documented with, and all together.
var installVariants = []installVariant{
	{name: "cert-manager"},
	{name: "self-managed", selfManaged: true, set: []string{"certificates.source=self"}},
	{name: "namespace-opt-in", components: []string{"namespace-opt-in"}, set: []string{"namespaceSelector.optIn=true"}},
	{name: "self-managed+namespace-opt-in", selfManaged: true, components: []string{"namespace-opt-in"},
		set: []string{"certificates.source=self", "namespaceSelector.optIn=true"}},
	{name: "webhook-ingress", selfManaged: true, components: []string{"webhook-ingress"},
		set: []string{"certificates.source=self", "webhookIngress.enabled=true"}},
	{name: "custom-workloads", components: []string{"custom-workloads"}, set: []string{"customWorkloads.enabled=true"}},
	{name: "custom-workloads+namespace-opt-in", components: []string{"namespace-opt-in", "custom-workloads"}, patches: optInCustomPatch,
		set: []string{"customWorkloads.enabled=true", "namespaceSelector.optIn=true"}},
	{name: "node-agent", components: []string{"node-agent"}, set: []string{"nodeAgent.enabled=true"}},
	{name: "node-agent-servicemonitor", components: []string{"node-agent", "node-agent-servicemonitor"},
		set: []string{"nodeAgent.enabled=true", "nodeAgent.serviceMonitor.enabled=true"}},
	{name: "node-agent-annotate", components: []string{"node-agent", "node-agent-annotate"},
		set: []string{"nodeAgent.enabled=true", "nodeAgent.annotate=true"}},
	{name: "node-agent-groups", components: []string{"node-agent", "node-agent-groups"},
		set: []string{"nodeAgent.enabled=true", "nodeAgent.groups=true"}},
	{name: "webhook-servicemonitor", components: []string{"webhook-servicemonitor"}, set: []string{"webhook.serviceMonitor.enabled=true"}},
	{name: "prometheus-rule", components: []string{"prometheus-rule"}, set: []string{"prometheusRule.enabled=true"}},
	{name: "grafana-dashboard", components: []string{"grafana-dashboard"}, set: []string{"grafanaDashboard.enabled=true"}},
	{name: "narrow-self", components: []string{"narrow-self"}, set: []string{"webhook.narrowSelf=true"}},
	{name: "pull-secrets", components: []string{"pull-secrets"}, set: []string{"webhook.pullSecrets.read=cluster"}},
	{name: "everything", selfManaged: true,
		components: []string{"namespace-opt-in", "custom-workloads", "webhook-ingress", "node-agent", "node-agent-servicemonitor", "node-agent-annotate",
			"node-agent-groups", "webhook-servicemonitor", "prometheus-rule", "grafana-dashboard"},
		patches: optInCustomPatch,
		set: []string{"certificates.source=self", "namespaceSelector.optIn=true", "customWorkloads.enabled=true", "webhookIngress.enabled=true",
			"nodeAgent.enabled=true", "nodeAgent.serviceMonitor.enabled=true", "nodeAgent.annotate=true", "nodeAgent.groups=true",
			"webhook.serviceMonitor.enabled=true", "prometheusRule.enabled=true", "grafanaDashboard.enabled=true"}},
}

// kustomize renders the variant from deploy/ with the kustomize built into
// the real kubectl.
func (v installVariant) kustomize(t *testing.T, kubectl string) []byte {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot(t), "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	base := rel
	if v.selfManaged {
		base += "/self-managed"
	}
	k := fmt.Sprintf("resources: [%s]\n", base)
	if len(v.components) > 0 {
		k += "components:\n"
		for _, c := range v.components {
			k += fmt.Sprintf("- %s/components/%s\n", rel, c)
		}
	}
	k += v.patches
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize (%s):\n%s\n%v\n%s", v.name, k, err, out)
	}
	return out
}

// helmArgs are the variant's values, in the namespace deploy/ installs to,
// which the chart then renders as deploy/ does (namespace.create: with helm
// install the namespace exists before the release).
func (v installVariant) helmArgs() []string {
	args := []string{"--namespace", "restart-supervisor", "--set", "namespace.create=true"}
	for _, s := range v.set {
		args = append(args, "--set", s)
	}
	return args
}

// TestChartMatchesKustomize renders the chart with the real helm and
// deploy/ with the real kubectl kustomize, for every variant and component
// deploy/ offers, and compares the objects field by field: the chart and
// deploy/ are one installation written twice, and an edit of either alone
// fails here.
func TestChartMatchesKustomize(t *testing.T) {
	kubectl := filepath.Join(kubeAssets(t), "kubectl")
	h := newHelm(t)
	for _, v := range installVariants {
		t.Run(v.name, func(t *testing.T) {
			want := parseObjects(t, "kubectl kustomize", v.kustomize(t, kubectl))
			// The helm test hook is the chart's alone.
			out, err := h.run(append([]string{"template", "restart-injector", chartDir(t), "--skip-tests"}, v.helmArgs()...)...)
			if err != nil {
				t.Fatal(err)
			}
			got := parseObjects(t, "helm template", out)
			for k, o := range got {
				withoutReleaseLabels(o, want[k])
			}
			// Both sides empty, or only a part of them, must not pass: every
			// variant has the base's 10 objects and a certificate source's 4.
			if len(want) < 14 {
				t.Fatalf("kubectl kustomize renders only %d objects: %v", len(want), sortedKeys(want))
			}
			for _, d := range diffObjects(want, got) {
				t.Error(d)
			}
		})
	}
}

// releaseLabels are the labels the chart puts on every object and pod
// template for its release (checked by TestChartReleaseLabels); deploy/ is no
// release and carries at most app.kubernetes.io/name.
var releaseLabels = []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "helm.sh/chart"}

// withoutReleaseLabels removes from a rendered object (and its pod
// template) the release labels that deploy/'s object lacks at the same
// place, so that every other label is compared.
func withoutReleaseLabels(obj, deploy map[string]any) {
	for _, path := range [][]string{{"metadata"}, {"spec", "template", "metadata"}} {
		labels, _ := dig(obj, path...)["labels"].(map[string]any)
		theirs, _ := dig(deploy, path...)["labels"].(map[string]any)
		if labels == nil {
			continue
		}
		for _, k := range releaseLabels {
			if _, ok := theirs[k]; !ok {
				delete(labels, k)
			}
		}
		if len(labels) == 0 {
			delete(dig(obj, path...), "labels")
		}
	}
}

// dig returns the map at path, nil where there is none.
func dig(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m, _ = m[p].(map[string]any)
	}
	return m
}

// TestChartLint runs the real `helm lint --strict` on the chart with the
// values of every variant.
func TestChartLint(t *testing.T) {
	h := newHelm(t)
	for _, v := range installVariants {
		args := append([]string{"lint", "--strict", chartDir(t)}, v.helmArgs()...)
		out, err := h.run(args...)
		if err != nil {
			t.Errorf("%s: %v", v.name, err)
			continue
		}
		if !bytes.Contains(out, []byte("1 chart(s) linted, 0 chart(s) failed")) {
			t.Errorf("%s: helm lint: %s", v.name, out)
		}
	}
}

// TestChartValues renders the chart with every documented value changed
// from its default and checks where each one lands; invalid values are
// refused by the chart's schema before anything is rendered.
func TestChartValues(t *testing.T) {
	h := newHelm(t)
	values := filepath.Join(t.TempDir(), "values.yaml")
	must(t, os.WriteFile(values, []byte(`
namespace: {name: rs-system, create: true}
imagePullSecrets: [{name: regcred}]
image: {repository: registry.example.com/ri, tag: v9.9.9, pullPolicy: IfNotPresent}
supervisorImage: {repository: registry.example.com/rs, tag: v9.9.8, digest: "sha256:`+strings.Repeat("ab", 32)+`", pullPolicy: Always}
serviceAccount: {annotations: {iam.example.com/role: webhook}}
webhook:
  replicas: 3
  failurePolicy: Ignore
  timeoutSeconds: 7
  objectSelector: {matchExpressions: [{key: skip, operator: DoesNotExist}]}
  clientCA: {secretName: apiserver-client-ca, key: bundle.pem}
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]}}}
  priorityClassName: system-cluster-critical
  podAnnotations: {example.com/scrape: "true"}
  serviceMonitor: {enabled: true, labels: {release: kps}}
  native: "off"
  delivery: image
  supervisorPullSecrets: [registry-a, registry-b]
  onEntrypointError: allow
  extraArgs: [--allowed-registries=registry.example.com]
  resources: {requests: {cpu: 100m, memory: 128Mi}, limits: {memory: 1Gi}}
  podDisruptionBudget: {minAvailable: null, maxUnavailable: 1}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Exists}]
  podLabels: {team: ml}
  strategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0}}
  podSecurityContext: {runAsUser: null, runAsGroup: null}
  platformUID: true
  securityContext: {privileged: false}
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: restart-injector}}}]
  extraVolumes: [{name: extra, configMap: {name: extra}}]
  extraVolumeMounts: [{name: extra, mountPath: /etc/extra}]
commonLabels: {cost-center: "42"}
prometheusRule: {enabled: true, labels: {release: kps}}
certificates: {source: self}
namespaceSelector:
  excluded: [kube-system]
  optIn: true
  matchExpressions: [{key: team, operator: Exists}]
customWorkloads:
  enabled: true
  rules: [{operations: [CREATE], apiGroups: [example.com], apiVersions: [v1], resources: [trainings]}]
nodeAgent: {enabled: true, namespace: rs-agent, interval: 5s, image: {tag: v9.9.7}, kubeletPodsDir: /var/snap/microk8s/common/var/lib/kubelet/pods,
  nodeSelector: {gpu: "true"}, tolerations: [{key: nvidia.com/gpu, operator: Exists}]}
`), 0o644))
	out, err := h.run("template", "restart-injector", chartDir(t), "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	objs := parseObjects(t, "helm template", out)
	at := func(key string, path ...any) any {
		t.Helper()
		o, ok := objs[key]
		if !ok {
			t.Fatalf("no object %s in %v", key, sortedKeys(objs))
		}
		var v any = o
		for _, p := range path {
			switch p := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[p]
			case int:
				l, _ := v.([]any)
				if p >= len(l) {
					return nil
				}
				v = l[p]
			}
		}
		return v
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	check := func(what string, got any, want string) {
		t.Helper()
		if js(got) != want {
			t.Errorf("%s = %s, want %s", what, js(got), want)
		}
	}
	deploy := "apps/v1 Deployment rs-system/restart-injector"
	pod := []any{"spec", "template", "spec"}
	ctr := append(append([]any{}, pod...), "containers", 0)
	check("namespace", at("v1 Namespace /rs-system", "metadata", "labels", "pod-security.kubernetes.io/enforce"), `"restricted"`)
	check("replicas", at(deploy, "spec", "replicas"), `3`)
	check("image", at(deploy, append(ctr, "image")...), `"registry.example.com/ri:v9.9.9"`)
	check("imagePullPolicy", at(deploy, append(ctr, "imagePullPolicy")...), `"IfNotPresent"`)
	check("args", at(deploy, append(ctr, "args")...), `["serve","--cert-dir=/etc/restart-injector/tls","--native=off","--delivery=image","--supervisor-pull-secret=registry-a","--supervisor-pull-secret=registry-b","--on-entrypoint-error=allow","--platform-uid",`+
		`"--supervisor-image=registry.example.com/rs@sha256:`+strings.Repeat("ab", 32)+`","--image-pull-policy=Always","--cert-mode=self",`+
		`"--client-ca-file=/etc/restart-injector/client-ca/bundle.pem","--allowed-registries=registry.example.com"]`)
	check("client CA mount", at(deploy, append(ctr, "volumeMounts", 1)...), `{"mountPath":"/etc/restart-injector/client-ca","name":"client-ca","readOnly":true}`)
	check("client CA volume", at(deploy, append(pod, "volumes", 1)...), `{"name":"client-ca","secret":{"secretName":"apiserver-client-ca"}}`)
	check("imagePullSecrets", at(deploy, append(pod, "imagePullSecrets")...), `[{"name":"regcred"}]`)
	check("affinity", at(deploy, append(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", 0, "matchExpressions", 0, "key")...), `"pool"`)
	check("priorityClassName", at(deploy, append(pod, "priorityClassName")...), `"system-cluster-critical"`)
	check("podAnnotations", at(deploy, "spec", "template", "metadata", "annotations"), `{"example.com/scrape":"true"}`)
	check("ServiceMonitor label", at("monitoring.coreos.com/v1 ServiceMonitor rs-system/restart-injector", "metadata", "labels", "release"), `"kps"`)
	check("PrometheusRule label", at("monitoring.coreos.com/v1 PrometheusRule rs-system/restart-injector", "metadata", "labels", "release"), `"kps"`)
	check("PrometheusRule groups", at("monitoring.coreos.com/v1 PrometheusRule rs-system/restart-injector", "spec", "groups", 1, "name"), `"restart-injector"`)
	check("hostNetwork off", at(deploy, append(pod, "hostNetwork")...), `null`)
	check("ServiceAccount annotations", at("v1 ServiceAccount rs-system/restart-injector", "metadata", "annotations"), `{"iam.example.com/role":"webhook"}`)
	check("resources", at(deploy, append(ctr, "resources")...), `{"limits":{"memory":"1Gi"},"requests":{"cpu":"100m","memory":"128Mi"}}`)
	check("nodeSelector", at(deploy, append(pod, "nodeSelector")...), `{"kubernetes.io/os":"linux"}`)
	check("tolerations", at(deploy, append(pod, "tolerations")...), `[{"key":"dedicated","operator":"Exists"}]`)
	check("PDB", at("policy/v1 PodDisruptionBudget rs-system/restart-injector", "spec", "maxUnavailable"), `1`)
	check("PDB minAvailable", at("policy/v1 PodDisruptionBudget rs-system/restart-injector", "spec", "minAvailable"), `null`)
	mwc := "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration /restart-injector"
	check("annotations without cert-manager", at(mwc, "metadata", "annotations"), `null`)
	for i := 0; i < 3; i++ {
		check(fmt.Sprintf("webhook %d service", i), at(mwc, "webhooks", i, "clientConfig", "service"),
			`{"name":"restart-injector","namespace":"rs-system","path":"/mutate","port":443}`)
		check(fmt.Sprintf("webhook %d namespaceSelector", i), at(mwc, "webhooks", i, "namespaceSelector"),
			`{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system","rs-system"]},`+
				`{"key":"restart-supervisor.dev/inject","operator":"In","values":["enabled"]},{"key":"team","operator":"Exists"}]}`)
	}
	for i := 0; i < 3; i++ {
		check(fmt.Sprintf("webhook %d failurePolicy", i), at(mwc, "webhooks", i, "failurePolicy"), `"Ignore"`)
		check(fmt.Sprintf("webhook %d timeoutSeconds", i), at(mwc, "webhooks", i, "timeoutSeconds"), `7`)
		check(fmt.Sprintf("webhook %d objectSelector", i), at(mwc, "webhooks", i, "objectSelector"), `{"matchExpressions":[{"key":"skip","operator":"DoesNotExist"}]}`)
	}
	check("custom rules", at(mwc, "webhooks", 2, "rules"), `[{"apiGroups":["example.com"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["trainings"]}]`)
	check("self-managed RoleBinding", at("rbac.authorization.k8s.io/v1 RoleBinding rs-system/restart-injector-certs", "subjects", 0, "namespace"), `"rs-system"`)
	ds := "apps/v1 DaemonSet rs-agent/restart-supervisor-node-agent"
	check("node agent image", at(ds, append(ctr, "image")...), `"registry.example.com/ri:v9.9.7"`)
	check("node agent interval", at(ds, append(ctr, "args", 3)...), `"--interval=5s"`)
	check("node agent imagePullSecrets", at(ds, append(pod, "imagePullSecrets")...), `[{"name":"regcred"}]`)
	check("node agent priorityClassName", at(ds, append(pod, "priorityClassName")...), `"system-node-critical"`)
	check("node agent binding", at("rbac.authorization.k8s.io/v1 ClusterRoleBinding /restart-supervisor-node-agent", "subjects", 0, "namespace"), `"rs-agent"`)
	check("node agent's kubelet pods directory", at(ds, append(pod, "volumes", 0, "hostPath", "path")...), `"/var/snap/microk8s/common/var/lib/kubelet/pods"`)
	check("node agent nodeSelector", at(ds, append(pod, "nodeSelector")...), `{"gpu":"true"}`)
	check("node agent tolerations", at(ds, append(pod, "tolerations")...), `[{"key":"nvidia.com/gpu","operator":"Exists"}]`)
	check("podLabels", at(deploy, "spec", "template", "metadata", "labels", "team"), `"ml"`)
	check("commonLabels on the Deployment", at(deploy, "metadata", "labels", "cost-center"), `"42"`)
	check("commonLabels on the node agent", at(ds, "metadata", "labels", "cost-center"), `"42"`)
	check("strategy", at(deploy, "spec", "strategy"), `{"rollingUpdate":{"maxUnavailable":0},"type":"RollingUpdate"}`)
	// The platform's UID (OpenShift's restricted-v2): no fixed UID or GID
	// left, the rest of the pod's securityContext kept.
	check("podSecurityContext", at(deploy, append(pod, "securityContext")...), `{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}`)
	check("securityContext", at(deploy, append(ctr, "securityContext")...), `{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"privileged":false,"readOnlyRootFilesystem":true}`)
	check("topologySpreadConstraints", at(deploy, append(pod, "topologySpreadConstraints", 0, "topologyKey")...), `"topology.kubernetes.io/zone"`)
	check("extraVolumes", at(deploy, append(pod, "volumes", 2)...), `{"configMap":{"name":"extra"},"name":"extra"}`)
	check("extraVolumeMounts", at(deploy, append(ctr, "volumeMounts", 2)...), `{"mountPath":"/etc/extra","name":"extra"}`)

	// No PodDisruptionBudget with one replica (minAvailable 1 would block
	// every drain of its node), nor when it is turned off.
	for _, set := range []string{"webhook.replicas=1", "webhook.podDisruptionBudget.enabled=false"} {
		out, err := h.run("template", "restart-injector", chartDir(t), "-n", "restart-supervisor", "--set", set)
		if err != nil {
			t.Fatal(err)
		}
		for key := range parseObjects(t, "helm template", out) {
			if strings.Contains(key, "PodDisruptionBudget") {
				t.Errorf("--set %s renders %s", set, key)
			}
		}
	}

	// cert-manager with another namespace: the names the certificate and
	// the CA injection carry follow it.
	out, err = h.run("template", "restart-injector", chartDir(t), "--set", "namespace.name=rs-system")
	if err != nil {
		t.Fatal(err)
	}
	objs = parseObjects(t, "helm template", out)
	check("inject-ca-from", at(mwc, "metadata", "annotations", "cert-manager.io/inject-ca-from"), `"rs-system/restart-injector"`)
	check("dnsNames", at("cert-manager.io/v1 Certificate rs-system/restart-injector", "spec", "dnsNames"),
		`["restart-injector.rs-system.svc","restart-injector.rs-system.svc.cluster.local"]`)
	check("secret volume", at("apps/v1 Deployment rs-system/restart-injector", append(pod, "volumes", 0, "secret", "secretName")...), `"restart-injector-tls"`)
	if _, ok := objs["v1 Namespace /restart-supervisor-node-agent"]; ok {
		t.Error("the node agent is rendered without nodeAgent.enabled")
	}

	// image.digest pins the webhook and, with no image of its own, the node
	// agent, which runs the same image.
	digest := "sha256:" + strings.Repeat("cd", 32)
	out, err = h.run("template", "restart-injector", chartDir(t), "-n", "restart-supervisor", "--set", "image.digest="+digest, "--set", "nodeAgent.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	objs = parseObjects(t, "helm template", out)
	check("webhook image by digest", at("apps/v1 Deployment restart-supervisor/restart-injector", append(ctr, "image")...), `"ghcr.io/restart-supervisor/restart-injector@`+digest+`"`)
	check("node agent image by digest", at("apps/v1 DaemonSet restart-supervisor-node-agent/restart-supervisor-node-agent", append(ctr, "image")...), `"ghcr.io/restart-supervisor/restart-injector@`+digest+`"`)

	// serviceAccount.create false: no ServiceAccount of the chart's, every
	// binding and the Deployment on the one named.
	out, err = h.run("template", "restart-injector", chartDir(t), "-n", "restart-supervisor", "--set", "serviceAccount.create=false",
		"--set", "serviceAccount.name=platform-sa", "--set", "certificates.source=self")
	if err != nil {
		t.Fatal(err)
	}
	objs = parseObjects(t, "helm template", out)
	check("serviceAccountName", at("apps/v1 Deployment restart-supervisor/restart-injector", append(pod, "serviceAccountName")...), `"platform-sa"`)
	for key, o := range objs {
		if strings.Contains(key, " ServiceAccount ") {
			t.Errorf("serviceAccount.create=false renders %s", key)
		}
		subjects, _ := o["subjects"].([]any)
		for _, sub := range subjects {
			if m, _ := sub.(map[string]any); m["kind"] == "ServiceAccount" && m["name"] != "platform-sa" {
				t.Errorf("%s binds ServiceAccount %v, want platform-sa", key, m["name"])
			}
		}
	}

	// global.imageRegistry: a mirror for every image, the registry part
	// replaced, or put in front of a repository without one.
	out, err = h.run("template", "restart-injector", chartDir(t), "-n", "restart-supervisor", "--set", "global.imageRegistry=mirror.example.com:5000/",
		"--set", "nodeAgent.enabled=true", "--set", "supervisorImage.repository=restart-supervisor", "--set", "image.tag=v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	objs = parseObjects(t, "helm template", out)
	check("webhook image from the mirror", at("apps/v1 Deployment restart-supervisor/restart-injector", append(ctr, "image")...), `"mirror.example.com:5000/restart-supervisor/restart-injector:v1.2.3"`)
	check("node agent image from the mirror", at("apps/v1 DaemonSet restart-supervisor-node-agent/restart-supervisor-node-agent", append(ctr, "image")...), `"mirror.example.com:5000/restart-supervisor/restart-injector:v1.2.3"`)
	if args := fmt.Sprint(at("apps/v1 Deployment restart-supervisor/restart-injector", append(ctr, "args")...)); !strings.Contains(args, "--supervisor-image=mirror.example.com:5000/restart-supervisor:") {
		t.Errorf("the supervisor image is not the mirror's: %s", args)
	}

	for _, bad := range []struct{ set, want string }{
		{"certificates.source=vault", "certificates/source"},
		{"webhook.native=maybe", "webhook/native"},
		{"webhook.delivery=volume", "webhook/delivery"},
		{"webhook.replica=3", "replica"},
		{"webhook.extraArgs={serve}", "extraArgs"},
		{"nodeAgent.interval=often", "interval"},
		{"webhook.failurePolicy=Retry", "failurePolicy"},
		{"webhook.timeoutSeconds=31", "timeoutSeconds"},
		{"webhook.port=0", "port"},
		{"webhook.hostNetwork=yes", "hostNetwork"},
		{"image.digest=latest", "digest"},
		{"webhook.clientCA.key=../ca.crt", "key"},
		{"imagePullSecrets[0].nam=x", "imagePullSecrets"},
		{"webhook.podDisruptionBudget.minAvaiable=1", "podDisruptionBudget"},
		{"nodeAgent.kubeletPodsDir=var/lib/kubelet/pods", "kubeletPodsDir"},
		{"global.imageRegistry=/mirror", "imageRegistry"},
	} {
		out, err := h.run("template", "restart-injector", chartDir(t), "--set", bad.set)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--set %s: want a schema error naming %q, got %v\n%s", bad.set, bad.want, err, out)
		}
	}
}

// parseObjects reads a stream of YAML documents as kubectl and helm read
// them (apimachinery's document reader, sigs.k8s.io/yaml), into objects keyed
// by "apiVersion kind namespace/name" in their JSON form, failing on a
// duplicate.
func parseObjects(t testing.TB, what string, stream []byte) map[string]map[string]any {
	t.Helper()
	objs := map[string]map[string]any{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, stream)
		}
		var obj map[string]any
		if err := sigsyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, doc)
		}
		if obj == nil {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		key := fmt.Sprintf("%v %v %v/%v", obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
		key = strings.Replace(key, " <nil>/", " /", 1)
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: %s twice", what, key)
		}
		objs[key] = obj
	}
	return objs
}

// diffObjects lists every object one side lacks and every field whose
// value differs, by its path.
func diffObjects(want, got map[string]map[string]any) []string {
	var diffs []string
	for _, k := range sortedKeys(want) {
		if _, ok := got[k]; !ok {
			diffs = append(diffs, "the chart does not render "+k)
		}
	}
	for _, k := range sortedKeys(got) {
		w, ok := want[k]
		if !ok {
			diffs = append(diffs, "the chart renders "+k+", which deploy/ does not")
			continue
		}
		fw, fg := map[string]string{}, map[string]string{}
		flatten("", w, fw)
		flatten("", got[k], fg)
		paths := map[string]bool{}
		for p := range fw {
			paths[p] = true
		}
		for p := range fg {
			paths[p] = true
		}
		var ps []string
		for p := range paths {
			if fw[p] != fg[p] {
				ps = append(ps, p)
			}
		}
		sort.Strings(ps)
		for _, p := range ps {
			diffs = append(diffs, fmt.Sprintf("%s %s: deploy/ %s, chart %s", k, p, orAbsent(fw[p]), orAbsent(fg[p])))
		}
		if len(ps) == 0 && !reflect.DeepEqual(w, got[k]) {
			diffs = append(diffs, k+": differs")
		}
	}
	return diffs
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// flatten writes every leaf of v (and every empty map or list) as path →
// its JSON.
func flatten(path string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 {
			out[path] = "{}"
		}
		for k, e := range v {
			flatten(path+"."+k, e, out)
		}
	case []any:
		if len(v) == 0 {
			out[path] = "[]"
		}
		for i, e := range v {
			flatten(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	default:
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
