package injector

import (
	"context"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

type kubeVersionKey struct{}

// WithKubeVersion returns a context under which MutatePod, PodPatch and
// InjectManifests validate restart fields like the API server of release v,
// overriding Options.KubeVersion. The webhook uses it with the version of
// the API server it serves, which it learns only after start-up.
func WithKubeVersion(ctx context.Context, v rules.KubeVersion) context.Context {
	return context.WithValue(ctx, kubeVersionKey{}, v)
}

// kubeVersion is the release to validate like: the context's, else
// Options.KubeVersion, else (zero) the newest.
func (i *Injector) kubeVersion(ctx context.Context) rules.KubeVersion {
	if v, ok := ctx.Value(kubeVersionKey{}).(rules.KubeVersion); ok && v != 0 {
		return v
	}
	return i.opts.KubeVersion
}
