package apiserver_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestPullSecretReadScope: the webhook's ServiceAccount reads no Secret by
// default; with webhook.pullSecrets.read=namespaces only those of the
// namespaces listed; with cluster, every namespace's. The chart's RBAC
// objects are applied to a real kube-apiserver and the API server's own
// authorizer answers (SubjectAccessReview), as it would for the webhook's
// token.
func TestPullSecretReadScope(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b", "restart-supervisor"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admin := kubeconfigFor(t, env, t.TempDir(), "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	h := newHelm(t)
	for _, tc := range []struct {
		release string
		set     []string
		want    map[string]bool // namespace → may get secrets
	}{
		{"default", nil, map[string]bool{"team-a": false, "team-b": false}},
		{"listed", []string{"webhook.pullSecrets.read=namespaces", "webhook.pullSecrets.namespaces={team-a}"}, map[string]bool{"team-a": true, "team-b": false}},
		{"cluster", []string{"webhook.pullSecrets.read=cluster"}, map[string]bool{"team-a": true, "team-b": true}},
	} {
		args := []string{"template", tc.release, chartDir(t), "--skip-tests", "--namespace", "restart-supervisor"}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := h.run(args...)
		if err != nil {
			t.Fatal(err)
		}
		// The RBAC objects only: nothing else here would run them.
		var rbac []string
		for _, o := range parseObjects(t, "helm template", out) {
			if kind, _ := o["kind"].(string); strings.HasSuffix(kind, "Role") || strings.HasSuffix(kind, "RoleBinding") {
				b, _ := json.Marshal(o)
				rbac = append(rbac, string(b))
			}
		}
		apply := exec.Command(filepath.Join(assets, "kubectl"), "--kubeconfig", admin, "apply", "-f", "-")
		apply.Stdin = strings.NewReader(strings.Join(rbac, "\n"))
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("%s: kubectl apply: %v\n%s", tc.release, err, out)
		}
		sa := tc.release + "-restart-injector"
		for ns, want := range tc.want {
			r, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:restart-supervisor:" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:restart-supervisor", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: "regcred"}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != want {
				t.Errorf("%s (%v): the webhook may get secrets in %s: %v, want %v", tc.release, tc.set, ns, r.Status.Allowed, want)
			}
		}
	}
}
