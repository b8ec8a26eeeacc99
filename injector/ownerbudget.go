package injector

import (
	"fmt"

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
		if s, _ := lookup(obj, []string{"spec", "failurePolicy", "restartStrategy"}).(string); s != "InPlaceRestart" {
			return nil, nil
		}
		field = []string{"spec", "failurePolicy", "maxRestarts"}
		if lookup(obj, field) == nil {
			return &ownerBudget{max: 0, from: yamledit.Dotted(field) + " (unset: 0)"}, nil
		}
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
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case float64:
		if x != float64(int64(x)) {
			return nil, fmt.Errorf("%s: must be a whole number", yamledit.Dotted(field))
		}
		n = int64(x)
	default:
		return nil, fmt.Errorf("%s: must be a whole number", yamledit.Dotted(field))
	}
	if n < 0 || n > 1<<31-1 {
		return nil, fmt.Errorf("%s: %d: must be between 0 and 2147483647", yamledit.Dotted(field), n)
	}
	return &ownerBudget{max: int32(n), from: yamledit.Dotted(field)}, nil
}

// applyOwnerBudget gives each ruled container without a restart budget of
// its own the owner's.
func applyOwnerBudget(crs []ContainerRules, b *ownerBudget) {
	if b == nil {
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
