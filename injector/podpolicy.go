package injector

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// The pod restartPolicy of a template is what the kubelet applies to the
// pods made from it, and what each wrapped container's podRestartPolicy
// must say. For most kinds it is the template's own spec.restartPolicy
// (default Always). Some controllers write it themselves, from fields of
// their own object, into every pod they create, whatever the template
// says. Offline (inject, explain) the injector sees only the object, so it
// derives the policy as the controller does; the webhook sees the pod the
// controller made, with the policy already in it.
//
// Each controller was read at the release named below:
//
//   - Kubeflow training-operator v1.8.1 (kubeflow.org/v1 PyTorchJob, TFJob,
//     MPIJob, XGBoostJob, PaddleJob; JAXJob since v1.9):
//     pkg/controller.v1/common/pod.go createNewPod calls
//     pkg/core/pod.go SetRestartPolicy, which sets the pod's policy to the
//     replica spec's restartPolicy, ExitCode becoming Never, and warns
//     ("Restart policy in pod template will be overwritten by restart
//     policy in replica spec") when the template has one; the MPIJob
//     controller (pkg/controller.v1/mpi/mpijob_controller.go) does the same
//     for launcher and workers. An unset replica restartPolicy is defaulted
//     first (Reconcile calls Scheme.Default): PyTorchJob and PaddleJob
//     OnFailure, TFJob, MPIJob, XGBoostJob and JAXJob Never
//     (pkg/apis/kubeflow.org/v1/*_types.go *DefaultRestartPolicy).
//   - Kubeflow MPI operator (kubeflow.org/v2beta1 MPIJob,
//     pkg/controller/mpi_job_controller.go newLauncherPodTemplate and
//     newWorker, setRestartPolicy as above); defaults in
//     pkg/apis/kubeflow/v2beta1/default.go: Launcher OnFailure
//     (DefaultLauncherRestartPolicy), Worker Never (DefaultRestartPolicy).
//   - KubeRay v1.5.0 (ray.io/v1, controllers/ray/common/pod.go
//     DefaultHeadPodTemplate and DefaultWorkerPodTemplate): with in-tree
//     autoscaling (enableInTreeAutoscaling: true) at autoscalerOptions.version
//     v2, head and workers get Never; a RayJob in SidecarMode gets a head
//     with Never (controllers/ray/rayjob_controller.go
//     constructRayClusterForRayJob). Otherwise the template's own, and the
//     submitter pod template of a RayJob is used as it is
//     (common/job.go GetSubmitterTemplate).
//
// The other kinds keep the template's own: JobSet and Kubeflow Trainer v2
// (v2.0.0 sets no restartPolicy anywhere; a TrainJob's pods come from its
// runtime's JobSet template), LeaderWorkerSet (pkg/controllers/
// leaderworkerset_controller.go copies the templates into StatefulSets,
// which the API server allows only with Always) and Volcano
// (pkg/controllers/job/job_controller_util.go createJobPod copies the
// template's spec; its mutating webhook sets no restartPolicy).

// derivedPolicy is the pod policy a controller sets for one template, and
// where it comes from, for messages.
type derivedPolicy struct {
	policy rules.RestartPolicy
	from   string
}

// kubeflowDefaults are the replica restartPolicy defaults of the
// training-operator's kinds (kubeflow.org/v1).
var kubeflowDefaults = map[string]rules.RestartPolicy{
	"PyTorchJob": rules.OnFailure,
	"PaddleJob":  rules.OnFailure,
	"TFJob":      rules.Never,
	"MPIJob":     rules.Never,
	"XGBoostJob": rules.Never,
	"JAXJob":     rules.Never,
}

// controllerPodPolicy returns the pod policy the controller of obj writes
// into the pods of the template at path, or nil where the template's own
// applies. An invalid replica restartPolicy is an error naming its field.
func controllerPodPolicy(obj map[string]any, apiVersion, kind string, path []string) (*derivedPolicy, error) {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	switch gv.Group {
	case "kubeflow.org":
		if _, ok := kubeflowDefaults[kind]; !ok || len(path) != 4 {
			return nil, nil
		}
		return kubeflowPodPolicy(obj, gv.Version, kind, path)
	case "ray.io":
		return rayPodPolicy(obj, kind, path), nil
	}
	return nil, nil
}

// kubeflowPodPolicy: path is spec.<kind>ReplicaSpecs.<type>.template.
func kubeflowPodPolicy(obj map[string]any, version, kind string, path []string) (*derivedPolicy, error) {
	replica, _ := lookup(obj, path[:3]).(map[string]any)
	field := yamledit.Dotted(path[:3]) + ".restartPolicy"
	controller := "the " + kind + " controller"
	raw := replica["restartPolicy"]
	value, isString := raw.(string)
	if raw != nil && !isString {
		return nil, fmt.Errorf("%s: want a string", field)
	}
	if value == "" {
		def := kubeflowDefaults[kind]
		if kind == "MPIJob" && version != "v1" && strings.EqualFold(path[2], "Launcher") {
			def = rules.OnFailure // mpi-operator's DefaultLauncherRestartPolicy
		}
		return &derivedPolicy{policy: def, from: fmt.Sprintf("%s sets it from %s, unset: default %s", controller, field, def)}, nil
	}
	switch rules.RestartPolicy(value) {
	case rules.Always, rules.OnFailure, rules.Never:
		return &derivedPolicy{policy: rules.RestartPolicy(value), from: fmt.Sprintf("%s sets it from %s", controller, field)}, nil
	case "ExitCode":
		return &derivedPolicy{policy: rules.Never, from: fmt.Sprintf("%s sets it from %s ExitCode, which is Never for the kubelet", controller, field)}, nil
	}
	return nil, fmt.Errorf(`%s: Unsupported value: %q: supported values: "Always", "ExitCode", "Never", "OnFailure"`, field, clip(value))
}

// rayPodPolicy covers RayCluster (cluster spec at spec), RayJob
// (spec.rayClusterSpec) and RayService (spec.rayClusterConfig).
func rayPodPolicy(obj map[string]any, kind string, path []string) *derivedPolicy {
	var clusterAt []string
	switch kind {
	case "RayCluster":
		clusterAt = []string{"spec"}
	case "RayJob":
		clusterAt = []string{"spec", "rayClusterSpec"}
	case "RayService":
		clusterAt = []string{"spec", "rayClusterConfig"}
	default:
		return nil
	}
	if len(path) <= len(clusterAt) {
		return nil // a RayJob's submitterPodTemplate: its own policy
	}
	cluster, _ := lookup(obj, clusterAt).(map[string]any)
	head := path[len(clusterAt)] == "headGroupSpec"
	if !head && path[len(clusterAt)] != "workerGroupSpecs" {
		return nil
	}
	at := yamledit.Dotted(clusterAt)
	if enabled, _ := cluster["enableInTreeAutoscaling"].(bool); enabled {
		if v, _ := lookup(cluster, []string{"autoscalerOptions", "version"}).(string); v == "v2" {
			return &derivedPolicy{policy: rules.Never, from: "KubeRay sets it with autoscaler v2 (" + at + ".autoscalerOptions.version)"}
		}
	}
	if head && kind == "RayJob" {
		if mode, _ := lookup(obj, []string{"spec", "submissionMode"}).(string); mode == "SidecarMode" {
			return &derivedPolicy{policy: rules.Never, from: "KubeRay sets it for spec.submissionMode SidecarMode"}
		}
	}
	return nil
}

// lookup follows map keys from v; nil where one is missing.
func lookup(v any, keys []string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
