package injector

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// What refuses a mutation before it is made: a pod already injected
// differently, names that clash with the injector's, mounts over the
// binaries, a readiness rule without a probe, a Windows pod.

// readinessRule says whether the wrapped containers of pod that have no
// readiness probe get `restart-probe ready` as one. It answers not ready
// while the supervisor runs no workload, as a container whose process has
// exited is natively; that matters where readiness is read: a Service's
// endpoints (which select by labels), a Deployment's or StatefulSet's
// rollout, a PodDisruptionBudget. Whether a Service selects the pod cannot
// be known from the pod, so the rule is: the pod restarts always (what
// Deployments, StatefulSets, DaemonSets and ReplicaSets require) and has
// labels. Batch pods (Jobs, training replicas: OnFailure or Never) and pods
// without labels get none, and save an exec every 2 s per container.
// AnnotationReadiness on the pod overrides the rule.
func readinessRule(pod *corev1.Pod, specPath, object string) (bool, error) {
	switch v, set := pod.Annotations[contract.AnnotationReadiness]; {
	case !set:
	case v == contract.ReadinessOn:
		return true, nil
	case v == contract.ReadinessOff:
		return false, nil
	default:
		meta := "metadata"
		if specPath != "spec" {
			meta = strings.TrimSuffix(specPath, ".spec") + ".metadata"
		}
		return false, fmt.Errorf(`%s: %s.annotations[%s]: Unsupported value: %q: supported values: %q, %q`,
			object, meta, contract.AnnotationReadiness, clip(v), contract.ReadinessOn, contract.ReadinessOff)
	}
	always := pod.Spec.RestartPolicy == "" || pod.Spec.RestartPolicy == corev1.RestartPolicyAlways
	return always && len(pod.Labels) > 0, nil
}

// alreadyInjected keeps an injected pod as it is, but refuses rules that
// were added to a container after the injection, since they would be
// silently ignored.
func alreadyInjected(res *Result, raw string, crs []ContainerRules, object string) error {
	var st Status
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return fmt.Errorf("%s: metadata.annotations[%s]: invalid: %v", object, contract.AnnotationStatus, err)
	}
	wrapped := map[string]bool{}
	for _, n := range st.Containers {
		wrapped[n] = true
	}
	for _, cr := range crs {
		if wrapped[cr.Name] {
			continue
		}
		if r, p := cr.gatedFields(); r || p {
			return fmt.Errorf("%s: %s: container %q carries restart rules but the pod was injected without it (annotation %s); inject the original manifest again",
				object, cr.Field, cr.Name, contract.AnnotationStatus)
		}
	}
	res.Containers = st.Containers
	if st.Version != contract.Version {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s was injected by restart-injector %s; left unchanged", object, st.Version))
	}
	return nil
}

func checkConflicts(pod *corev1.Pod, specPath, object string) error {
	for i, v := range pod.Spec.Volumes {
		if v.Name == contract.BinVolume || v.Name == contract.StateVolume {
			return fmt.Errorf("%s: %s.volumes[%d].name: %q is reserved for restart-supervisor", object, specPath, i, v.Name)
		}
	}
	for i, c := range pod.Spec.InitContainers {
		if c.Name == contract.InstallContainer {
			return fmt.Errorf("%s: %s.initContainers[%d].name: %q is reserved for restart-supervisor", object, specPath, i, c.Name)
		}
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == contract.InstallContainer {
			return fmt.Errorf("%s: %s.containers[%d].name: %q is reserved for restart-supervisor", object, specPath, i, c.Name)
		}
	}
	return checkBinMounts(pod, specPath, object, false)
}

// checkBinMounts refuses a container that mounts the binary volume
// read-write: it could replace the supervisor that every wrapped container
// runs as PID 1. A manifest can name the volume in a mount without
// declaring it (the injector adds it), in any container: regular, init,
// sidecar or ephemeral. Only the install container, in a pod injected
// already, writes there. Refused rather than made read-only, so that a
// container that meant to write there fails at admission with its name,
// not at run time with EROFS.
func checkBinMounts(pod *corev1.Pod, specPath, object string, injected bool) error {
	check := func(field string, i int, name string, mounts []corev1.VolumeMount) error {
		for j, vm := range mounts {
			if vm.Name == contract.BinVolume && !vm.ReadOnly {
				return fmt.Errorf("%s: %s.%s[%d].volumeMounts[%d]: container %q mounts %s read-write; it holds the supervisor binary of the wrapped containers: set readOnly: true",
					object, specPath, field, i, j, name, contract.BinVolume)
			}
		}
		return nil
	}
	for i, c := range pod.Spec.InitContainers {
		if injected && c.Name == contract.InstallContainer {
			continue
		}
		if err := check("initContainers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	for i, c := range pod.Spec.Containers {
		if err := check("containers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if err := check("ephemeralContainers", i, c.Name, c.VolumeMounts); err != nil {
			return err
		}
	}
	return nil
}

// windowsOnly names the field that binds a pod to Windows nodes: os.name,
// the nodeSelector kubernetes.io/os, or a required node affinity every
// term of which asks for kubernetes.io/os windows. "" when none does.
func windowsOnly(spec *corev1.PodSpec) string {
	if spec.OS != nil && spec.OS.Name == corev1.Windows {
		return "os.name"
	}
	if spec.NodeSelector[corev1.LabelOSStable] == string(corev1.Windows) {
		return "nodeSelector: " + corev1.LabelOSStable + "=windows"
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for _, term := range terms {
		if !termWindowsOnly(term) {
			return ""
		}
	}
	if len(terms) == 0 {
		return ""
	}
	return "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution: " + corev1.LabelOSStable + " windows"
}

// termWindowsOnly: the term (its expressions are ANDed) only matches nodes
// labelled kubernetes.io/os=windows.
func termWindowsOnly(term corev1.NodeSelectorTerm) bool {
	for _, e := range term.MatchExpressions {
		if e.Key == corev1.LabelOSStable && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) > 0 &&
			!slices.ContainsFunc(e.Values, func(v string) bool { return v != string(corev1.Windows) }) {
			return true
		}
	}
	return false
}
