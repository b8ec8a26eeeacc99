package injector

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"

	"github.com/restart-supervisor/restart-supervisor/internal/yamledit"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// ownerBudget is the restart budget an object's own fields imply for the
// containers of one of its templates, where the user set none
// (restartBudget in the rules annotation wins): the controllers that read
// restartCount stop at their own limit, and a container the supervisor
// restarts in place forever never moves restartCount, so it never reaches
// it (docs/supervisor.md, "Controllers that read restartCount").
type ownerBudget struct {
	max  int32
	from string // the field, for explain
	// none: the owner implies no container budget, only a group limit.
	none bool
	// group is the limit of group restarts (RestartGroup, docs/gang.md)
	// the owner implies, nil for none: a JobSet's explicit
	// spec.failurePolicy.maxRestarts, the recreations of the whole JobSet
	// it allows, of which a group restart is the in-place counterpart.
	group     *int32
	groupFrom string
}

// ownerBudgetOf reads it for the template at path of obj, where the
// owner's controller counts the container restarts the rules make
// natively, so that in-place restarts would otherwise go unseen:
//
//   - JobSet (jobset.x-k8s.io) with spec.failurePolicy.restartStrategy
//     InPlaceRestart: spec.failurePolicy.maxRestarts (default 0), for every
//     template; JobSet fails the JobSet when a container's restartCount
//     passes it (JobSet pkg/controllers/in_place_restart.go
//     getMaxContainerRestartCount). Under the default strategy (Recreate)
//     maxRestarts counts recreations of the JobSet, which no container
//     restart makes natively: no budget.
//   - RayJob (ray.io) spec.submitterConfig.backoffLimit, for
//     spec.submitterPodTemplate when its pods restart OnFailure: the
//     submitter is a Job, whose backoffLimit counts its pods' restartCount
//     only then (k8s.io/kubernetes v1.37.2 pkg/controller/job
//     pastBackoffLimitOnFailure; KubeRay v1.5.0
//     ray-operator/apis/ray/v1/rayjob_types.go SubmitterConfig).
//
// nil when none applies. A value that is not a whole number from 0 to
// MaxInt32 is an error naming the field.
func ownerBudgetOf(obj map[string]any, apiVersion, kind string, path []string) (*ownerBudget, error) {
	gk := groupKind(apiVersion, kind)
	var field []string
	switch {
	case gk.Group == "jobset.x-k8s.io" && gk.Kind == "JobSet":
		field = []string{"spec", "failurePolicy", "maxRestarts"}
		var group *int32
		if lookup(obj, field) != nil {
			n, err := wholeNumber(lookup(obj, field), field)
			if err != nil {
				return nil, err
			}
			group = &n
		}
		if s, _ := lookup(obj, []string{"spec", "failurePolicy", "restartStrategy"}).(string); s != "InPlaceRestart" {
			if group == nil {
				return nil, nil
			}
			return &ownerBudget{none: true, group: group, groupFrom: yamledit.Dotted(field)}, nil
		}
		if group == nil {
			return &ownerBudget{max: 0, from: yamledit.Dotted(field) + " (unset: 0)"}, nil
		}
		return &ownerBudget{max: *group, from: yamledit.Dotted(field), group: group, groupFrom: yamledit.Dotted(field)}, nil
	case gk.Group == "ray.io" && gk.Kind == "RayJob" && len(path) >= 2 && path[0] == "spec" && path[1] == "submitterPodTemplate":
		tmpl, _ := lookup(obj, path).(map[string]any)
		if p, _ := lookup(tmpl, []string{"spec", "restartPolicy"}).(string); p != "OnFailure" {
			return nil, nil
		}
		field = []string{"spec", "submitterConfig", "backoffLimit"}
	default:
		return nil, nil
	}
	v := lookup(obj, field)
	if v == nil {
		return nil, nil
	}
	n, err := wholeNumber(v, field)
	if err != nil {
		return nil, err
	}
	return &ownerBudget{max: n, from: yamledit.Dotted(field)}, nil
}

// wholeNumber is the value v of field as a count: a whole number from 0 to
// MaxInt32, or an error naming the field.
func wholeNumber(v any, field []string) (int32, error) {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case float64:
		if x != float64(int64(x)) {
			return 0, fmt.Errorf("%s: must be a whole number", yamledit.Dotted(field))
		}
		n = int64(x)
	default:
		return 0, fmt.Errorf("%s: must be a whole number", yamledit.Dotted(field))
	}
	if n < 0 || n > 1<<31-1 {
		return 0, fmt.Errorf("%s: %d: must be between 0 and 2147483647", yamledit.Dotted(field), n)
	}
	return int32(n), nil
}

// groupLimit is the value of contract.AnnotationGroupMaxRestarts the
// mutation adds to a pod whose rules use RestartGroup and that sets none:
// the owner's, "" for none.
func groupLimit(pod *corev1.Pod, crs []ContainerRules, b *ownerBudget) string {
	if b == nil || b.group == nil || !restartsGroup(crs) {
		return ""
	}
	if _, set := pod.Annotations[contract.AnnotationGroupMaxRestarts]; set {
		return ""
	}
	return strconv.Itoa(int(*b.group))
}

// restartsGroup reports whether any rule of the pod is RestartGroup.
func restartsGroup(crs []ContainerRules) bool {
	return slices.ContainsFunc(crs, ContainerRules.usesGroup)
}

// applyOwnerBudget gives each ruled container without a restart budget of
// its own the owner's.
func applyOwnerBudget(crs []ContainerRules, b *ownerBudget) {
	if b == nil || b.none {
		return
	}
	for k := range crs {
		if crs[k].Ruled && crs[k].Limits.RestartBudget == nil {
			m := b.max
			crs[k].Limits.RestartBudget = &rules.RestartBudget{MaxRestarts: &m}
			crs[k].BudgetFrom = b.from
		}
	}
}
