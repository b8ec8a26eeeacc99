package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// pullSecretScope is what one review lets the webhook read: secrets in the
// namespace the API server named in request.namespace, by the names in the
// pod's imagePullSecrets as the API server sent them (which already hold the
// service account's: the ServiceAccount admission plugin runs before
// webhooks).
type pullSecretScope struct {
	namespace string
	names     map[string]bool
}

type pullSecretScopeKey struct{}

// withPullSecretScope returns ctx carrying what the review of pod in
// namespace may read.
func withPullSecretScope(ctx context.Context, namespace string, pod *corev1.Pod) context.Context {
	s := pullSecretScope{namespace: namespace, names: map[string]bool{}}
	for _, r := range pod.Spec.ImagePullSecrets {
		s.names[r.Name] = true
	}
	return context.WithValue(ctx, pullSecretScopeKey{}, s)
}

// PullSecretReader returns the injector's PullSecrets function: it reads,
// through client, only secrets that the review in ctx allows (see
// withPullSecretScope) and refuses any other, whatever namespace and names
// it is asked for. Secrets that are not pull secrets are dropped as soon as
// they are read. A pull secret that cannot be read is skipped, as the
// kubelet does.
func PullSecretReader(client kubernetes.Interface, log *slog.Logger) func(ctx context.Context, namespace string, names []string) ([]corev1.Secret, error) {
	return func(ctx context.Context, namespace string, names []string) ([]corev1.Secret, error) {
		scope, ok := ctx.Value(pullSecretScopeKey{}).(pullSecretScope)
		switch {
		case !ok || scope.namespace == "":
			return nil, errors.New("pull secrets are read only for a review that names its namespace")
		case namespace != scope.namespace:
			return nil, fmt.Errorf("pull secrets are read only in the review's namespace %q, not %q", scope.namespace, namespace)
		}
		for _, n := range names {
			if !scope.names[n] {
				return nil, fmt.Errorf("secret %q is not one of the pod's imagePullSecrets", n)
			}
		}
		var out []corev1.Secret
		for _, n := range names {
			s, err := client.CoreV1().Secrets(scope.namespace).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				log.Debug("pull secret not readable", "namespace", scope.namespace, "name", n, "err", err)
				continue
			}
			if s.Type != corev1.SecretTypeDockerConfigJson && s.Type != corev1.SecretTypeDockercfg {
				log.Debug("not a pull secret; ignored", "namespace", scope.namespace, "name", n, "type", s.Type)
				continue
			}
			out = append(out, *s)
		}
		return out, nil
	}
}
