package apiserver_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
)

const agentSA = "system:serviceaccount:restart-supervisor-node-agent:restart-supervisor-node-agent"

// asAgent is a client with the identity of the node agent's ServiceAccount
// as a pod-bound token on node gives it (extra["authentication.kubernetes.io/
// node-name"]; none when node is ""), by impersonation.
func asAgent(t *testing.T, cfg *rest.Config, node string) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:restart-supervisor-node-agent", "system:authenticated"}}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodeAgentAnnotatePolicy: with node-agent-annotate the agent's
// ServiceAccount may patch pods (RBAC has no narrower verb), and the
// component's ValidatingAdmissionPolicy narrows that to the one annotation
// on pods of the agent's own node. Each attack is a patch the ClusterRole
// alone allows (measured before the policy: replacing a kube-system pod's
// image); the real agent, with --annotate, still annotates its node's pod.
func TestNodeAgentAnnotatePolicy(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	kubectl := filepath.Join(assets, "kubectl")
	dir := t.TempDir()
	kdir := filepath.Join(dir, "k")
	must(t, os.MkdirAll(kdir, 0o755))
	rel, _ := filepath.Rel(kdir, filepath.Join(repoRoot(t), "deploy"))
	must(t, os.WriteFile(filepath.Join(kdir, "kustomization.yaml"),
		[]byte(fmt.Sprintf("resources: []\ncomponents:\n- %s/components/node-agent\n- %s/components/node-agent-annotate\n", rel, rel)), 0o644))
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	if out, err := exec.Command(kubectl, "--kubeconfig", admin, "apply", "-k", kdir).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k node-agent + node-agent-annotate: %v\n%s", err, out)
	}

	mine := createPod(t, client, "mine", agentNode, "app")
	theirs := createPod(t, client, "theirs", "node-b", "app")
	ctx := context.Background()
	patch := func(c kubernetes.Interface, name string, uid types.UID, body string) error {
		_, err := c.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType,
			[]byte(strings.ReplaceAll(body, "UID", string(uid))), metav1.PatchOptions{})
		return err
	}
	annotation := `{"metadata":{"uid":"UID","annotations":{"` + contract.AnnotationRestarts + `":"{\"app\":1}"}}}`
	agent := asAgent(t, env.Config, agentNode)

	// The policy is in force once the API server has read it.
	waitFor(t, "the policy to deny another node's pod", 60*time.Second, func(context.Context) (bool, error) {
		err := patch(agent, "theirs", theirs.UID, annotation)
		return err != nil && strings.Contains(err.Error(), "restart-supervisor-node-agent-annotate"), err
	})
	for _, c := range []struct {
		name   string
		client kubernetes.Interface
		pod    string
		uid    types.UID
		body   string
		want   string // "" allowed, else in the denial
	}{
		{"the annotation on its node's pod", agent, "mine", mine.UID, annotation, ""},
		{"the annotation on another node's pod", agent, "theirs", theirs.UID, annotation, "only pods of its own node"},
		{"a token that names no node", asAgent(t, env.Config, ""), "mine", mine.UID, annotation, "only pods of its own node"},
		{"the image", agent, "mine", mine.UID, `{"spec":{"containers":[{"name":"app","image":"evil"}]}}`, "only the annotation"},
		{"a label", agent, "mine", mine.UID, `{"metadata":{"labels":{"app":"evil"}}}`, "only the annotation"},
		{"another annotation", agent, "mine", mine.UID, `{"metadata":{"annotations":{"x":"evil"}}}`, "only the annotation"},
		{"a finalizer", agent, "mine", mine.UID, `{"metadata":{"finalizers":["evil.example/f"]}}`, "only the annotation"},
	} {
		err := patch(c.client, c.pod, c.uid, c.body)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want a denial saying %q", c.name, err, c.want)
		default:
			t.Logf("%s: %v", c.name, err)
		}
	}

	// The real agent, as its ServiceAccount on its node, with --annotate.
	podsDir := filepath.Join(dir, "pods")
	writeStatus(t, stateDir(t, podsDir, mine.UID), "app", 2, 0, false)
	writeStatus(t, stateDir(t, podsDir, theirs.UID), "app", 5, 0, false)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- nodeagent.Run(runCtx, nodeagent.Config{Client: agent, NodeName: agentNode, PodsDir: podsDir,
			Interval: 20 * time.Millisecond, Annotate: true, AnnotateEvery: 100 * time.Millisecond,
			Ready: func(net.Addr) {}})
	}()
	waitFor(t, "the agent's annotation", 30*time.Second, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, errors.Join(errors.New("agent exited"), err)
		default:
		}
		p, err := client.CoreV1().Pods("default").Get(ctx, "mine", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := p.Annotations[contract.AnnotationRestarts]
		return v == `{"app":2}`, fmt.Errorf("annotation %q", v)
	})
	cancel()
	<-done
}
