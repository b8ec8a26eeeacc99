package apiserver_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// TestWebhookStepsAside: on a real v1.37.2 API server (which keeps the
// restart fields and the RestartAllContainers action), the webhook of
// deploy/base/webhook.yaml with --narrow-self, running with no more rights
// than deploy/components/narrow-self gives its ServiceAccount: while every
// node is a 1.37 kubelet that declares RestartAllContainers, a pod with rules
// in its fields is no longer sent to the webhook (the API server's own count
// of calls does not move) and one with the rules annotation still is; a 1.34
// node joins and the installed expression is back, so the fields' pod is
// injected again. Each change is an Event; a second look changes nothing.
func TestWebhookStepsAside(t *testing.T) {
	env, admin := startAPIServer(t, kubeAssetsFor(t, "v1.37.2"), true)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	for _, ns := range []string{webhookNamespace, "apps"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	applyComponentRBAC(t, admin, "narrow-self")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ca, err := webhook.NewCA("e2e-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.WriteKeyPair(certDir, serving, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	mwc := projectWebhookConfig(t, "https://"+ln.Addr().String()+"/mutate", ca.CertPEM)
	installed := mwc.Webhooks[0].MatchConditions[0].Expression
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook always injects what it is sent: what reaches it is the
	// API server's choice, by the matchConditions.
	wh := startWebhook(t, certDir, ln, log, nil)
	injectedNow := func(p *corev1.Pod) bool {
		got, err := admin.CoreV1().Pods("apps").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatalf("dry-run create of %s: %v", p.Name, err)
		}
		return injected(got)
	}
	waitFor(t, "the webhook configuration to take effect", 30*time.Second, func(context.Context) (bool, error) {
		return injectedNow(nativeRulesPod("probe")), nil
	})

	// The narrower and the detector run as the webhook's ServiceAccount.
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + webhookNamespace + ":restart-injector"}
	client, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	d := &webhook.NativeDetector{Client: admin, Namespace: webhookNamespace, Log: log}
	n := &webhook.SelfNarrower{Client: client, WebhookConfig: "restart-injector", Log: log}
	step := func(wantNarrow bool) {
		t.Helper()
		ok, okAll, why, err := d.CheckAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok && okAll != wantNarrow {
			t.Fatalf("--native=auto concluded rules %v, RestartAllContainers %v (%s)", ok, okAll, why)
		}
		changed, err := n.Apply(ctx, ok && okAll, why)
		if err != nil || !changed {
			t.Fatalf("apply narrow=%v: changed %v, %v", wantNarrow, changed, err)
		}
		if changed, err := n.Apply(ctx, ok && okAll, why); err != nil || changed {
			t.Errorf("a second apply changed %v, %v: want nothing to do", changed, err)
		}
		got, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "restart-injector", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		expr := got.Webhooks[0].MatchConditions[0].Expression
		saved, has := got.Annotations[webhook.AnnotationWideCondition]
		switch {
		case wantNarrow && (expr != webhook.NarrowRulesExpression || saved != installed):
			t.Fatalf("narrowed: expression %q, saved %q", expr, saved)
		case !wantNarrow && (expr != installed || has):
			t.Fatalf("widened: expression %q, annotation kept %v", expr, has)
		}
	}

	addNode(t, admin, "node-137", "v1.37.2", webhook.DeclaredRestartAllContainers)
	step(true)
	waitFor(t, "the narrowed configuration to take effect", 30*time.Second, func(context.Context) (bool, error) {
		return !injectedNow(nativeRulesPod("probe-narrow")), nil
	})
	before := wh.reviews(t)
	p, err := admin.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("fields-narrowed"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if injected(p) || len(p.Spec.Containers[0].RestartPolicyRules) != 1 {
		t.Errorf("a pod with rules in its fields, all nodes native: injected %v, rules %v; want it left to the kubelet", injected(p), p.Spec.Containers[0].RestartPolicyRules)
	}
	if after := wh.reviews(t); after != before {
		t.Errorf("the webhook was called %v times for a pod the narrowed conditions leave out", after-before)
	}
	if p, err := admin.CoreV1().Pods("apps").Create(ctx, annotatedPod("annotated-narrowed"), metav1.CreateOptions{}); err != nil || !injected(p) {
		t.Errorf("a pod with the rules annotation while narrowed: injected %v, %v", p != nil && injected(p), err)
	}

	addNode(t, admin, "node-134", "v1.34.4")
	step(false)
	waitFor(t, "the widened configuration to take effect", 30*time.Second, func(context.Context) (bool, error) {
		return injectedNow(nativeRulesPod("probe-wide")), nil
	})
	reasons := map[string]int{}
	evs, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "MutatingWebhookConfiguration" && e.InvolvedObject.Name == "restart-injector" {
			reasons[e.Reason]++
			if e.Reason == "WebhookWidened" && !strings.Contains(e.Message, "node-134") {
				t.Errorf("the widening Event does not name the node: %s", e.Message)
			}
		}
	}
	if reasons["WebhookNarrowed"] != 1 || reasons["WebhookWidened"] != 1 {
		t.Errorf("Events %v, want one WebhookNarrowed and one WebhookWidened", reasons)
	}

	// The component's rights reach no other configuration.
	other := projectWebhookConfig(t, "https://127.0.0.1:1/mutate", ca.CertPEM)
	other.Name = "someone-else"
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := &webhook.SelfNarrower{Client: client, WebhookConfig: "someone-else", Log: log}
	if _, err := o.Apply(ctx, true, "test"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("narrowing another configuration with the component's rights: %v, want forbidden", err)
	}
}

// applyComponentRBAC creates the RBAC objects of deploy/components/<name>/rbac.yaml.
func applyComponentRBAC(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "components", name, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	createObjects(t, client, b)
}

// createObjects creates the RBAC objects of a multi-document manifest.
func createObjects(t *testing.T, client kubernetes.Interface, manifest []byte) {
	t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode: %v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("createObjects: %T is not an RBAC object", obj)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
