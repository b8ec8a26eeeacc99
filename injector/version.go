package injector

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// Call is what one mutation may take from its caller rather than from
// Options: what the webhook learns of its cluster only after start-up
// (the API server's release, what --delivery=auto found the nodes
// support), passed explicitly, call by call. A zero field keeps Options'.
type Call struct {
	// KubeVersion overrides Options.KubeVersion: the release whose
	// API-server validation the restart fields must pass.
	KubeVersion rules.KubeVersion
	// Delivery overrides Options.Delivery.
	Delivery Delivery
}

// With is i for one call: Options with c's fields that are set. i is not
// changed.
func (i *Injector) With(c Call) *Injector {
	if c == (Call{}) {
		return i
	}
	j := *i
	if c.KubeVersion != 0 {
		j.opts.KubeVersion = c.KubeVersion
	}
	if c.Delivery != "" {
		j.opts.Delivery = c.Delivery
	}
	return &j
}

// PodPatchWith is PodPatch with c's inputs over Options.
func (i *Injector) PodPatchWith(ctx context.Context, pod *corev1.Pod, c Call) (*Result, error) {
	return i.With(c).PodPatch(ctx, pod)
}

// MutatePodWith is MutatePod with c's inputs over Options.
func (i *Injector) MutatePodWith(ctx context.Context, pod *corev1.Pod, c Call) (*Result, error) {
	return i.With(c).MutatePod(ctx, pod)
}

// kubeVersion is the release to validate like: Options.KubeVersion, or
// (zero) the newest.
func (i *Injector) kubeVersion() rules.KubeVersion { return i.opts.KubeVersion }
