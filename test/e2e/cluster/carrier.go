package cluster

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// annotatedRules is the part of one container's entry of the
// restart-supervisor.dev/rules annotation (docs/injector.md) that the
// container's fields can say; the entry's other keys (restartBudget and the
// other limits, which no field holds) are kept as they are.
type annotatedRules struct {
	RestartPolicy      *corev1.ContainerRestartPolicy `json:"restartPolicy,omitempty"`
	RestartPolicyRules []corev1.ContainerRestartRule  `json:"restartPolicyRules,omitempty"`
}

// RulesToAnnotation moves the restart fields of every container of a pod
// (or pod template) into its restart-supervisor.dev/rules annotation,
// the carrier that works on a release without the fields
// (!RestartRulesNative): such an API server drops restartPolicyRules when it
// decodes the pod, before any webhook sees it, and refuses a restartPolicy
// on anything but a sidecar. A sidecar's restartPolicy Always stays on the
// init container, where every release from 1.29 knows it; its rules move.
// An entry the annotation already has for a container must say the same as
// the container's fields; its other keys stay.
func RulesToAnnotation(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
	ann := map[string]map[string]json.RawMessage{}
	if v, ok := meta.Annotations[contract.AnnotationRules]; ok {
		if err := json.Unmarshal([]byte(v), &ann); err != nil {
			return fmt.Errorf("annotation %s: %w", contract.AnnotationRules, err)
		}
	}
	changed := false
	move := func(c *corev1.Container, init bool) error {
		var a annotatedRules
		if c.RestartPolicy != nil && !(init && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways) {
			a.RestartPolicy, c.RestartPolicy = c.RestartPolicy, nil
		}
		a.RestartPolicyRules, c.RestartPolicyRules = c.RestartPolicyRules, nil
		if a.RestartPolicy == nil && len(a.RestartPolicyRules) == 0 {
			return nil
		}
		changed = true
		entry := ann[c.Name]
		if entry == nil {
			entry = map[string]json.RawMessage{}
		}
		_, hasPolicy := entry["restartPolicy"]
		_, hasRules := entry["restartPolicyRules"]
		if hasPolicy || hasRules {
			var old annotatedRules
			b, _ := json.Marshal(map[string]json.RawMessage{"restartPolicy": entry["restartPolicy"], "restartPolicyRules": entry["restartPolicyRules"]})
			if err := json.Unmarshal(b, &old); err != nil {
				return fmt.Errorf("container %q: annotation %s: %w", c.Name, contract.AnnotationRules, err)
			}
			want, _ := json.Marshal(a)
			have, _ := json.Marshal(old)
			if string(want) != string(have) {
				return fmt.Errorf("container %q: annotation %s says %s, the container's fields %s", c.Name, contract.AnnotationRules, have, want)
			}
		}
		if a.RestartPolicy != nil {
			entry["restartPolicy"], _ = json.Marshal(a.RestartPolicy)
		}
		if len(a.RestartPolicyRules) > 0 {
			entry["restartPolicyRules"], _ = json.Marshal(a.RestartPolicyRules)
		}
		ann[c.Name] = entry
		return nil
	}
	for i := range spec.InitContainers {
		if err := move(&spec.InitContainers[i], true); err != nil {
			return err
		}
	}
	for i := range spec.Containers {
		if err := move(&spec.Containers[i], false); err != nil {
			return err
		}
	}
	if !changed {
		return nil
	}
	b, err := json.Marshal(ann)
	if err != nil {
		return err
	}
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[contract.AnnotationRules] = string(b)
	return nil
}
