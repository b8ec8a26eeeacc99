package manifests

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// TestControllerPodPolicy: offline, the pod policy of each template is the
// one its controller writes into the pods (podpolicy.go cites each
// controller's source and release), in explain and in the configuration
// inject writes.
func TestControllerPodPolicy(t *testing.T) {
	type want struct{ policy, from string }
	cases := []struct {
		name string
		doc  string
		want []want // per template, in document order
	}{
		// training-operator v1.8.1 pkg/core/pod.go SetRestartPolicy; defaults
		// pkg/apis/kubeflow.org/v1/pytorch_types.go PyTorchJobDefaultRestartPolicy.
		{"PyTorchJob default", replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "", ""),
			[]want{{"OnFailure", "spec.pytorchReplicaSpecs.Master.restartPolicy, unset: default OnFailure"}}},
		{"PyTorchJob Never", replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Worker", "Never", ""),
			[]want{{"Never", "spec.pytorchReplicaSpecs.Worker.restartPolicy"}}},
		{"PyTorchJob ExitCode", replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "ExitCode", ""),
			[]want{{"Never", "ExitCode, which is Never"}}},
		{"PyTorchJob replica over template", replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "OnFailure", "Always"),
			[]want{{"OnFailure", "spec.pytorchReplicaSpecs.Master.restartPolicy"}}},
		{"PyTorchJob Always", replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "Always", ""),
			[]want{{"Always", "spec.pytorchReplicaSpecs.Master.restartPolicy"}}},
		// tensorflow_types.go TFJobDefaultRestartPolicy Never.
		{"TFJob default", replicaJob("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", "Chief", "", ""),
			[]want{{"Never", "default Never"}}},
		// pkg/controller.v1/mpi/mpijob_controller.go setRestartPolicy; mpi_types.go MPIJobDefaultRestartPolicy Never.
		{"MPIJob v1 launcher default", replicaJob("kubeflow.org/v1", "MPIJob", "mpiReplicaSpecs", "Launcher", "", ""),
			[]want{{"Never", "default Never"}}},
		// mpi-operator pkg/apis/kubeflow/v2beta1/default.go: Launcher OnFailure, Worker Never.
		{"MPIJob v2beta1 launcher default", replicaJob("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", "Launcher", "", ""),
			[]want{{"OnFailure", "default OnFailure"}}},
		{"MPIJob v2beta1 worker default", replicaJob("kubeflow.org/v2beta1", "MPIJob", "mpiReplicaSpecs", "Worker", "", ""),
			[]want{{"Never", "default Never"}}},
		// xgboost_types.go Never, paddlepaddle_types.go OnFailure, jax_types.go (v1.9) Never.
		{"XGBoostJob default", replicaJob("kubeflow.org/v1", "XGBoostJob", "xgbReplicaSpecs", "Master", "", ""),
			[]want{{"Never", "default Never"}}},
		{"PaddleJob default", replicaJob("kubeflow.org/v1", "PaddleJob", "paddleReplicaSpecs", "Master", "", ""),
			[]want{{"OnFailure", "default OnFailure"}}},
		{"JAXJob default", replicaJob("kubeflow.org/v1", "JAXJob", "jaxReplicaSpecs", "Worker", "", ""),
			[]want{{"Never", "default Never"}}},
		// KubeRay v1.5.0 controllers/ray/common/pod.go: the template's own
		// unless autoscaler v2, then Never for head and workers.
		{"RayCluster", rayDoc("RayCluster", "", "", ""), []want{{"Always", ""}, {"Always", ""}}},
		{"RayCluster autoscaler v2", rayDoc("RayCluster", "", "  enableInTreeAutoscaling: true\n  autoscalerOptions: {version: v2}\n", ""),
			[]want{{"Never", "autoscaler v2"}, {"Never", "autoscaler v2"}}},
		{"RayCluster autoscaler v1", rayDoc("RayCluster", "", "  enableInTreeAutoscaling: true\n", ""),
			[]want{{"Always", ""}, {"Always", ""}}},
		// controllers/ray/rayjob_controller.go: SidecarMode makes the head Never.
		{"RayJob SidecarMode", rayDoc("RayJob", "rayClusterSpec", "", "  submissionMode: SidecarMode\n"),
			[]want{{"Never", "SidecarMode"}, {"Always", ""}}},
		{"RayJob K8sJobMode", rayDoc("RayJob", "rayClusterSpec", "", ""), []want{{"Always", ""}, {"Always", ""}}},
		{"RayService autoscaler v2", rayDoc("RayService", "rayClusterConfig", "    enableInTreeAutoscaling: true\n    autoscalerOptions: {version: v2}\n", ""),
			[]want{{"Never", "autoscaler v2"}, {"Never", "autoscaler v2"}}},
		// LeaderWorkerSet (pkg/controllers/leaderworkerset_controller.go), Volcano
		// (pkg/controllers/job/job_controller_util.go createJobPod) and JobSet keep
		// the template's own policy.
		{"LeaderWorkerSet", `apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: l}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        containers:
        - {name: w, image: registry.test/a:1, command: [/a], restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}], restartPolicy: Never}
`, []want{{"Always", ""}}},
		{"Volcano Job", `apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: v}
spec:
  tasks:
  - name: t
    replicas: 1
    template:
      spec:
        restartPolicy: OnFailure
        containers:
        - {name: w, image: registry.test/a:1, command: [/a], restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}], restartPolicy: Never}
`, []want{{"OnFailure", ""}}},
	}
	inj := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:t"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ReadManifests([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			plans, err := ExplainManifests(m, rules.NewestKube)
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != len(tc.want) {
				t.Fatalf("%d plans, want %d", len(plans), len(tc.want))
			}
			for i, w := range tc.want {
				p := plans[i]
				if p.PodPolicy != w.policy || !strings.Contains(p.PodPolicyFrom, w.from) || (w.from == "") != (p.PodPolicyFrom == "") {
					t.Errorf("%s: pod policy %s (%q), want %s (%q)", p.Object, p.PodPolicy, p.PodPolicyFrom, w.policy, w.from)
				}
			}
			res, err := inj.MutateObject(context.Background(), &unstructured.Unstructured{Object: m.Docs[0].Object})
			if err != nil {
				t.Fatal(err)
			}
			// The patch goes template by template, in document order.
			raw, err := json.Marshal(res.Patch)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, g := range regexp.MustCompile(`podRestartPolicy\\"+:\\"+(\w+)`).FindAllStringSubmatch(string(raw), -1) {
				got = append(got, g[1])
			}
			if len(got) != len(tc.want) {
				t.Fatalf("inject wrote %d configurations, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				if got[i] != w.policy {
					t.Errorf("template %d: inject wrote podRestartPolicy %s, want %s", i, got[i], w.policy)
				}
			}
		})
	}
}

// TestControllerPodPolicyMessages: a replica restartPolicy the controller
// does not know is refused with its field, and a template policy the
// controller overwrites is pointed out.
func TestControllerPodPolicyMessages(t *testing.T) {
	m, err := ReadManifests([]byte(replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "Sometimes", "")))
	if err != nil {
		t.Fatal(err)
	}
	_, err = ExplainManifests(m, rules.NewestKube)
	want := `line 1: PyTorchJob "j": spec.pytorchReplicaSpecs.Master.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "ExitCode", "Never", "OnFailure"`
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}

	m, err = ReadManifests([]byte(replicaJob("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "Master", "ExitCode", "Always")))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := ExplainManifests(m, rules.NewestKube)
	if err != nil {
		t.Fatal(err)
	}
	want = `PyTorchJob "j": spec.pytorchReplicaSpecs.Master.template.spec.restartPolicy "Always" is not what its pods get: Never (the PyTorchJob controller sets it from spec.pytorchReplicaSpecs.Master.restartPolicy ExitCode, which is Never for the kubelet)`
	if len(plans) != 1 || len(plans[0].Warnings) == 0 || plans[0].Warnings[0] != want {
		t.Errorf("warnings %q, want %q first", plans[0].Warnings, want)
	}
	res, err := injector.New(injector.Options{}).MutateObject(context.Background(), &unstructured.Unstructured{Object: m.Docs[0].Object})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Warnings, want) {
		t.Errorf("inject warnings %q lack %q", res.Warnings, want)
	}
}

// replicaJob is a Kubeflow job of kind with one replica type of
// the given replica restartPolicy ("" for none) and template policy.
func replicaJob(apiVersion, kind, specs, rtype, replicaPolicy, templatePolicy string) string {
	rp, tp := "", ""
	if replicaPolicy != "" {
		rp = "\n      restartPolicy: " + replicaPolicy
	}
	if templatePolicy != "" {
		tp = "\n          restartPolicy: " + templatePolicy
	}
	return `apiVersion: ` + apiVersion + `
kind: ` + kind + `
metadata: {name: j}
spec:
  ` + specs + `:
    ` + rtype + `:
      replicas: 1` + rp + `
      template:
        spec:` + tp + `
          containers:
          - name: main
            image: registry.test/app:1
            command: ["/app"]
            restartPolicy: Never
            restartPolicyRules:
            - {action: Restart, exitCodes: {operator: In, values: [42]}}
`
}

// rayDoc is a KubeRay object of kind whose cluster spec (at clusterKey
// under spec, or spec itself) has head and one worker group, each with
// rules; extra is added to the cluster spec, top to the object's spec.
func rayDoc(kind, clusterKey, extra, top string) string {
	indent := "  "
	head := "spec:\n" + top
	if clusterKey != "" {
		head += "  " + clusterKey + ":\n"
		indent = "    "
	}
	container := func(name string) string {
		return indent + "      spec:\n" +
			indent + "        containers:\n" +
			indent + "        - name: " + name + "\n" +
			indent + "          image: registry.test/ray:2\n" +
			indent + "          command: [ray, start, --block]\n" +
			indent + "          restartPolicyRules:\n" +
			indent + "          - {action: Restart, exitCodes: {operator: In, values: [1]}}\n" +
			indent + "          restartPolicy: Never\n"
	}
	body := head + extra +
		indent + "headGroupSpec:\n" + indent + "  rayStartParams: {}\n" + indent + "  template:\n" + container("head") +
		indent + "workerGroupSpecs:\n" + indent + "- groupName: w\n" + indent + "  rayStartParams: {}\n" + indent + "  template:\n" + container("worker")
	return "apiVersion: ray.io/v1\nkind: " + kind + "\nmetadata: {name: r}\n" + body
}
