package apiserver_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// TestCheckCommand runs the built `restart-injector check` against a real
// kube-apiserver with deploy/base/webhook.yaml pointed at a webhook on
// loopback: up (every check ok, the pod injected and supervised on a 1.34
// kubelet), a pod without rules and a namespace the selector excludes
// (fail), a stale caBundle (the direct TLS check and the API server's dry
// run both fail), the webhook down, and no configuration at all.
func TestCheckCommand(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "check-admin", Groups: []string{"system:masters"}})
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	for _, ns := range []string{webhookNamespace, "apps"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addNode(t, client, agentNode, "v1.34.4")
	registerAgentPod(t, client, agentNode)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	certDir := t.TempDir()
	ca, err := webhook.NewCA("check-ca", time.Now())
	must(t, err)
	serving, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	must(t, err)
	must(t, webhook.WriteKeyPair(certDir, serving, ca.CertPEM))
	mwc := projectWebhookConfig(t, "https://"+ln.Addr().String()+"/mutate", ca.CertPEM)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	detector := &webhook.NativeDetector{Client: client, Namespace: webhookNamespace, Log: log}
	if _, _, err := detector.Check(ctx); err != nil {
		t.Fatal(err)
	}
	wh := startWebhook(t, certDir, ln, log, detector)
	waitFor(t, "the webhook configuration to take effect", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && injected(p), err
	})
	pod := nativeRulesPod("trainer")
	pod.Spec.NodeName = agentNode
	if _, err := client.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"check", "--kubeconfig=" + admin}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("$ restart-injector check %s  (exit %d)\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return code, out.String() + errb.String()
	}
	// line finds the line of one check and says whether it has status.
	line := func(out, check, status string, contains ...string) bool {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[1] == check {
				if f[0] != status {
					return false
				}
				for _, c := range contains {
					if !strings.Contains(l, c) {
						return false
					}
				}
				return true
			}
		}
		return false
	}
	expect := func(out string, want ...[]string) {
		t.Helper()
		for _, w := range want {
			if !line(out, w[0], w[1], w[2:]...) {
				t.Errorf("no line %q", w)
			}
		}
	}

	// Up.
	code, out := run("trainer", "-n", "apps")
	if code != 0 {
		t.Errorf("check trainer, webhook up: exit %d, want 0", code)
	}
	expect(out,
		[]string{"webhook-config", "ok"}, []string{"ca-bundle", "ok", "verifies the certificate served at 127.0.0.1:"},
		[]string{"admission", "ok", "comes back injected"}, []string{"restart-rules", "ok", "the pod is injected"},
		[]string{"webhook-rules", "ok"}, []string{"namespace-selector", "ok"}, []string{"object-selector", "ok"},
		[]string{"injected", "ok"}, []string{"node-agent", "warn", agentNode, "published no Event-signing key"},
		[]string{"path", "ok", "supervised: the pod was injected"})

	// The agent's key, as the agent publishes it.
	publishAgentKey(t, client, agentNode)
	_, out = run("trainer", "-n", "apps")
	expect(out, []string{"node-agent", "ok", agentNode, "its Event-signing key published"})

	// A Pod manifest without rules, and one in a namespace the
	// namespaceSelector excludes.
	plain := filepath.Join(dir, "plain.yaml")
	must(t, os.WriteFile(plain, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: web, image: nginx}]\n"), 0o644))
	code, out = run("-f", plain, "-n", "apps")
	if code != 1 {
		t.Errorf("check -f plain.yaml: exit %d, want 1", code)
	}
	expect(out, []string{"restart-rules", "fail", "no container carries restart rules"}, []string{"node-agent", "ok", "not scheduled"})

	// A pod with rules on the node, not created: which path it takes
	// there, by --native=auto's checks.
	onNode := filepath.Join(dir, "on-node.yaml")
	must(t, os.WriteFile(onNode, []byte(`apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  nodeName: `+agentNode+`
  restartPolicy: Never
  containers:
  - name: trainer
    image: registry.test/trainer:1
    command: [/train]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
`), 0o644))
	code, out = run("-f", onNode, "-n", "apps")
	if code != 0 {
		t.Errorf("check -f on-node.yaml: exit %d, want 0", code)
	}
	expect(out, []string{"admission", "ok", "comes back injected"}, []string{"restart-rules", "ok", "containers trainer carry"},
		[]string{"node-agent", "ok", agentNode},
		[]string{"path", "ok", "supervised on node " + agentNode + " (kubelet v1.34.4)", "the API server keeps restartPolicyRules but kubelets older than"})
	ruled := filepath.Join(dir, "ruled.yaml")
	must(t, os.WriteFile(ruled, []byte(`apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  restartPolicy: Never
  containers:
  - name: trainer
    image: registry.test/trainer:1
    command: [/train]
    restartPolicy: Never
    restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
`), 0o644))
	code, out = run("-f", ruled, "-n", "kube-system")
	if code != 1 {
		t.Errorf("check -f ruled.yaml -n kube-system: exit %d, want 1", code)
	}
	expect(out, []string{"namespace-selector", "fail", "namespace kube-system does not match"}, []string{"admission", "ok", "admitted unchanged"})
	if code, _ := run("trainer", "-f", ruled); code != 2 {
		t.Errorf("check POD -f FILE: exit %d, want 2", code)
	}

	// A workload as users have it: each pod template checked, under a line
	// that names it; every other line is a check (no log line among them).
	job := filepath.Join(dir, "job.yaml")
	must(t, os.WriteFile(job, []byte(`apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train, namespace: apps}
spec:
  replicatedJobs:
  - name: leader
    template: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: trainer, image: registry.test/trainer:1, command: [/train],
      restartPolicy: Never, restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]}]}}}}
  - name: workers
    template: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: web, image: nginx}]}}}}
`), 0o644))
	code, out = run("-f", job)
	if code != 1 {
		t.Errorf("check -f jobset.yaml: exit %d, want 1 (the workers' template carries no rules)", code)
	}
	sections := strings.Split(out, "--    JobSet train ")
	if len(sections) != 3 || !strings.HasPrefix(sections[1], "/spec/replicatedJobs/0/template/spec/template") ||
		!line(sections[1], "admission", "ok", "comes back injected") || !line(sections[2], "restart-rules", "fail", "no container carries restart rules") {
		t.Errorf("check -f jobset.yaml: want a section per template, the leader's injected, the workers' without rules:\n%s", out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 0 || !slices.Contains([]string{"ok", "warn", "fail", "--"}, f[0]) {
			t.Errorf("a line of check's report that is no check: %q", l)
		}
	}
	// -o json: the same results, each with the object it is about.
	code, out = run("-f", job, "-o", "json")
	var results []struct{ Status, Check, Message, Fix, Object string }
	if err := json.Unmarshal([]byte(out), &results); err != nil || code != 1 {
		t.Errorf("check -o json: exit %d, %v:\n%s", code, err, out)
	}
	objects := map[string]bool{}
	for _, r := range results {
		objects[r.Object] = true
	}
	if !objects["JobSet train /spec/replicatedJobs/1/template/spec/template"] || len(results) < 10 {
		t.Errorf("check -o json: %d results about %v", len(results), objects)
	}

	// A stale caBundle: another CA's certificate.
	other, err := webhook.NewCA("other-ca", time.Now())
	must(t, err)
	setCA := func(b []byte) {
		t.Helper()
		cur, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
		must(t, err)
		for i := range cur.Webhooks {
			cur.Webhooks[i].ClientConfig.CABundle = b
		}
		_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
		must(t, err)
	}
	setCA(other.CertPEM)
	// The API server's admission chain follows the configuration
	// through an informer: the dry run fails once it has.
	waitFor(t, "check to see the stale caBundle in the dry run", 60*time.Second, func(context.Context) (bool, error) {
		code, out = run("-f", ruled, "-n", "apps")
		return code == 1 && line(out, "admission", "fail", "x509"), nil
	})
	expect(out, []string{"ca-bundle", "fail", "does not verify the certificate served", "other-ca", "the caBundle is stale"},
		[]string{"admission", "fail", "x509", "caBundle does not verify"})

	// The webhook down.
	setCA(ca.CertPEM)
	wh.stop()
	waitFor(t, "check to see the webhook down", 60*time.Second, func(context.Context) (bool, error) {
		code, out = run("-n", "apps")
		return code == 1 && line(out, "admission", "fail", "failed calling webhook"), nil
	})
	expect(out, []string{"ca-bundle", "fail", "no TLS connection", "connection refused"}, []string{"admission", "fail", "the webhook is down"})

	// No configuration.
	must(t, client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{}))
	code, out = run("-n", "apps")
	if code != 1 {
		t.Errorf("check without the configuration: exit %d, want 1", code)
	}
	expect(out, []string{"webhook-config", "fail", "not found", "kubectl apply -k deploy/"})
}

// TestCheckWebhookPods: check names the first failure a new install shows,
// the webhook's own pods: none (the Deployment made none), or one in
// ImagePullBackOff, named with its image, from the pod's status on a real
// API server (no kubelet: the test writes the status a kubelet would).
func TestCheckWebhookPods(t *testing.T) {
	env, client := startAPIServer(t, kubeAssets(t), true)
	ctx := context.Background()
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "check-admin", Groups: []string{"system:masters"}})
	bin := buildInjector(t, dir)
	for _, ns := range []string{"ri-system", "apps"} {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must(t, err)
	}
	sel := map[string]string{"app.kubernetes.io/name": "ri"}
	_, err := client.CoreV1().Services("ri-system").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ri"},
		Spec: corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Port: 443}}}}, metav1.CreateOptions{})
	must(t, err)
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "ri-restart-injector"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "inject.restart-supervisor.dev", FailurePolicy: &ignore, SideEffects: &none,
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ri-system", Name: "ri"}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}}}, metav1.CreateOptions{})
	must(t, err)
	check := func() string {
		out, _ := exec.Command(bin, "check", "--kubeconfig", admin, "-n", "apps").CombinedOutput()
		return string(out)
	}
	if out := check(); !strings.Contains(out, "fail  webhook-pods        no pod of the webhook runs: Service ri-system/ri selects none") {
		t.Errorf("check with no webhook pod:\n%s", out)
	}
	pod, err := client.CoreV1().Pods("ri-system").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ri-7d9f-abcde", Labels: sel},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "restart-injector", Image: "ghcr.io/restart-supervisor/restart-injector:v0.1.0"}}}},
		metav1.CreateOptions{})
	must(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "restart-injector", Image: "ghcr.io/restart-supervisor/restart-injector:v0.1.0",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}}
	_, err = client.CoreV1().Pods("ri-system").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(t, err)
	want := "fail  webhook-pods        0 of 1 pods of the webhook ready; ri-7d9f-abcde: ImagePullBackOff (image ghcr.io/restart-supervisor/restart-injector:v0.1.0): Back-off pulling image"
	if out := check(); !strings.Contains(out, want) {
		t.Errorf("check with the webhook's pod in ImagePullBackOff lacks %q:\n%s", want, out)
	}

	// version --remote: the API server's version and the images the
	// webhook's pods (found through the configuration, whatever its
	// name) and the node agents' pods run.
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}, metav1.CreateOptions{})
	must(t, err)
	agentKey, agentValue, _ := strings.Cut(agentapi.AgentLabel, "=")
	_, err = client.CoreV1().Pods(agentapi.AgentNamespace).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-x1", Labels: map[string]string{agentKey: agentValue}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/restart-supervisor/restart-injector:v0.0.9"}}}}, metav1.CreateOptions{})
	must(t, err)
	out, err := exec.Command(bin, "version", "--remote", "--kubeconfig", admin).CombinedOutput()
	server, verr := client.Discovery().ServerVersion()
	must(t, verr)
	for _, line := range []string{"server: Kubernetes " + server.GitVersion, "webhook: ghcr.io/restart-supervisor/restart-injector:v0.1.0", "node agents: ghcr.io/restart-supervisor/restart-injector:v0.0.9"} {
		if err != nil || !strings.Contains(string(out), line+"\n") {
			t.Errorf("version --remote: %v, want the line %q:\n%s", err, line, out)
		}
	}
	out, err = exec.Command(bin, "version", "--remote", "--kubeconfig", admin, "--server", "https://127.0.0.1:1").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "the API server's version") {
		t.Errorf("version --remote against no server: %v, want exit 1 and one line:\n%s", err, out)
	}
}
