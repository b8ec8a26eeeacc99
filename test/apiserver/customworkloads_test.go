package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// customKind is one kind of deploy/components/custom-workloads, with a
// pod template at the place its operator keeps it.
type customKind struct {
	group, version, kind, plural string
	// object is the object's spec with TEMPLATE where a pod template goes.
	spec string
}

var customKinds = []customKind{
	{"jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", `{"replicatedJobs":[{"name":"w","template":{"spec":{"template":TEMPLATE}}}]}`},
	{"ray.io", "v1", "RayCluster", "rayclusters", `{"headGroupSpec":{"template":{"spec":{"containers":[{"name":"head","image":"ray"}]}}},"workerGroupSpecs":[{"template":TEMPLATE}]}`},
	{"ray.io", "v1", "RayJob", "rayjobs", `{"rayClusterSpec":{"headGroupSpec":{"template":TEMPLATE}}}`},
	{"kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", `{"pytorchReplicaSpecs":{"Master":{"replicas":1,"template":TEMPLATE}}}`},
	{"leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", `{"leaderWorkerTemplate":{"workerTemplate":TEMPLATE}}`},
	{"trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", `{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":TEMPLATE}}}]}}}`},
	{"batch.volcano.sh", "v1alpha1", "Job", "jobs", `{"tasks":[{"name":"t","template":TEMPLATE}]}`},
}

// TestCustomWorkloadsWebhookDown: the customWorkloads entry as
// deploy/components/custom-workloads renders it, with the webhook not
// answering (a closed loopback port). Objects whose templates carry no
// rules are created as usual; only those that carry rules are refused
// (failurePolicy Fail: not stored without the rules' annotation).
func TestCustomWorkloadsWebhookDown(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, false)
	kubectl := filepath.Join(assets, "kubectl")
	dir := t.TempDir()
	rel, _ := filepath.Rel(dir, filepath.Join(repoRoot(t), "deploy"))
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"),
		[]byte(fmt.Sprintf("resources: [%s/base]\ncomponents: [%s/components/custom-workloads]\n", rel, rel)), 0o644))
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: MutatingWebhookConfiguration") {
			mwc = &admissionregistrationv1.MutatingWebhookConfiguration{}
			must(t, yaml.UnmarshalStrict([]byte(doc), mwc))
		}
	}
	if mwc == nil {
		t.Fatal("no MutatingWebhookConfiguration rendered")
	}
	var custom []admissionregistrationv1.MutatingWebhook
	down := fmt.Sprintf("https://127.0.0.1:%d/mutate", freePort(t))
	for _, w := range mwc.Webhooks {
		if w.Name == "custom-templates.restart-supervisor.dev" {
			w.ClientConfig.Service, w.ClientConfig.URL = nil, &down
			custom = append(custom, w)
		}
	}
	if len(custom) != 1 || len(custom[0].MatchConditions) == 0 {
		t.Fatalf("custom-workloads renders %d custom entries (matchConditions %v)", len(custom), custom)
	}
	mwc.Webhooks = custom
	ctx := context.Background()
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the entry: %v", err)
	}

	var crds []*apiextensionsv1.CustomResourceDefinition
	preserve := true
	for _, k := range customKinds {
		crds = append(crds, &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: k.plural + "." + k.group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: k.group, Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: k.kind, Plural: k.plural},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: k.version, Served: true, Storage: true,
					Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object", XPreserveUnknownFields: &preserve}}}}}})
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{CRDs: crds}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	plain := `{"spec":{"containers":[{"name":"app","image":"busybox"}]}}`
	ruled := `{"spec":{"containers":[{"name":"app","image":"busybox","restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}]}}`
	ruledInit := `{"spec":{"initContainers":[{"name":"init","image":"busybox","restartPolicy":"Never"}],"containers":[{"name":"app","image":"busybox"}]}}`
	for _, k := range customKinds {
		res := dyn.Resource(schema.GroupVersionResource{Group: k.group, Version: k.version, Resource: k.plural}).Namespace("default")
		for _, c := range []struct {
			name, template string
			refused        bool
		}{{"plain", plain, false}, {"ruled", ruled, true}, {"ruled-init", ruledInit, true}} {
			var spec map[string]any
			must(t, json.Unmarshal([]byte(strings.ReplaceAll(k.spec, "TEMPLATE", c.template)), &spec))
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.group + "/" + k.version, "kind": k.kind,
				"metadata": map[string]any{"name": strings.ToLower(k.kind) + "-" + c.name}, "spec": spec}}
			_, err := res.Create(ctx, obj, metav1.CreateOptions{})
			switch {
			case c.refused && (err == nil || !strings.Contains(err.Error(), "custom-templates.restart-supervisor.dev")):
				t.Errorf("%s %s: created while the webhook is down (%v)", k.kind, c.name, err)
			case !c.refused && err != nil:
				t.Errorf("%s %s: refused while the webhook is down, though no template carries rules: %v", k.kind, c.name, err)
			}
		}
	}
}
