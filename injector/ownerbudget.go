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

// ownerBudgetOf reads it for the template at path of obj:
//
//   - JobSet (jobset.x-k8s.io) spec.failurePolicy.maxRestarts, for every
//     template: the JobSet restarts (recreates every Job) at most that
//     often (JobSet v0.12.0 api/jobset/v1alpha2/jobset_types.go
//     FailurePolicy.MaxRestarts); a container restarts in place as often,
//     then its exit goes to the kubelet and the Job's and JobSet's own
//     policies decide.
//   - RayJob (ray.io) spec.submitterConfig.backoffLimit, for
//     spec.submitterPodTemplate only: the submitter Job's backoffLimit
//     (KubeRay v1.5.0 ray-operator/apis/ray/v1/rayjob_types.go
//     SubmitterConfig.BackoffLimit).
//
// nil when the object sets no such field. A value that is not a whole
// number from 0 to MaxInt32 is an error naming the field.
func ownerBudgetOf(obj map[string]any, apiVersion, kind string, path []string) (*ownerBudget, error) {
	gk := groupKind(apiVersion, kind)
	var field []string
	switch {
	case gk.Group == "jobset.x-k8s.io" && gk.Kind == "JobSet":
		field = []string{"spec", "failurePolicy", "maxRestarts"}
	case gk.Group == "ray.io" && gk.Kind == "RayJob" && len(path) >= 2 && path[0] == "spec" && path[1] == "submitterPodTemplate":
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
