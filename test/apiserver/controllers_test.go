//go:build controllers

package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// builtController returns the directory a hack script (training-operator.sh,
// kuberay.sh) fills: a controller built from the module proxy and its
// CRDs. Outside CI a machine that cannot build it skips.
func builtController(t *testing.T, script string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "hack", script))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("hack/%s: %v", script, err)
		}
		t.Skipf("no controller (hack/%s: %v)", script, err)
	}
	return lines[len(lines)-1]
}

// applyCRD applies a CRD file with kubectl and waits until it is served.
func applyCRD(t *testing.T, kubectl, kubeconfig, file, name string) {
	t.Helper()
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", file, err, out)
	}
	waitFor(t, name+" established", 60*time.Second, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "crd/"+name,
			"-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`).Output()
		return err == nil && string(out) == "True", nil
	})
}

// injectOffline runs the built restart-injector inject on doc.
func injectOffline(t *testing.T, dir, doc string) string {
	t.Helper()
	bin := filepath.Join(dir, "restart-injector")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-injector")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	inject := exec.Command(bin, "inject", "--no-lookup", "-f", "-")
	inject.Stdin = strings.NewReader(doc)
	injected, err := inject.Output()
	if err != nil {
		t.Fatalf("inject: %v", err)
	}
	return string(injected)
}

// podRestartPolicy is the podRestartPolicy of container's configuration
// in pod, "" when it is not wrapped.
func podRestartPolicy(t *testing.T, p corev1.Pod, container string) string {
	t.Helper()
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if c.Name == container && e.Name == contract.EnvConfig {
				var cfg rules.Config
				if err := json.Unmarshal([]byte(e.Value), &cfg); err != nil {
					t.Fatal(err)
				}
				return string(cfg.PodRestartPolicy)
			}
		}
	}
	return ""
}

// The PyTorchJob of TestTrainingOperatorPodPolicy: a Master whose replica
// says Never, Workers with none (the controller's default, OnFailure),
// each container Never with a Restart rule on 42.
const trainingJob = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pt, namespace: default}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: pytorch
            image: registry.test/trainer:1
            command: [torchrun, train.py]
            restartPolicy: Never
            restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: registry.test/trainer:1
            command: [torchrun, train.py]
            restartPolicy: Never
            restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]
`

// TestTrainingOperatorPodPolicy runs the Kubeflow training-operator
// v1.8.1 (built from the module proxy) on a real API server over a
// PyTorchJob injected offline: every pod it creates has the restartPolicy
// the injector wrote into its wrapped container's podRestartPolicy
// (injector/podpolicy.go), Never for the Master, OnFailure for the Worker.
// Before, the injector wrote Always, and a Master exiting 0 was held.
func TestTrainingOperatorPodPolicy(t *testing.T) {
	assets := kubeAssets(t)
	to := builtController(t, "training-operator.sh")
	env, client := startAPIServer(t, assets, false)
	ctx := context.Background()
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	kubectl := filepath.Join(assets, "kubectl")
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", admin}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	applyCRD(t, kubectl, admin, filepath.Join(to, "crds", "kubeflow.org_pytorchjobs.yaml"), "pytorchjobs.kubeflow.org")

	// What the operator's certificate rotator (pkg/cert/cert.go) updates:
	// its Secret and its validating webhook configuration, here without
	// webhooks, so that no job is sent to a webhook that is not served.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubeflow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("kubeflow").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "training-operator-webhook-cert"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "validator.training-operator.kubeflow.org"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs := runProcess(t, "training-operator", filepath.Join(to, "training-operator"), "--kubeconfig="+admin, "--enable-scheme=pytorchjob",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", freePort(t)), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", freePort(t)),
		fmt.Sprintf("--webhook-server-port=%d", freePort(t)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("training-operator:\n%s", tail(logs.String(), 40))
		}
	})

	// The kubelet would mount that Secret where the webhook server reads
	// its certificate (the rotator waits for the files before it lets the
	// controllers start): copy it there once the rotator has filled it.
	certDir := "/tmp/k8s-webhook-server/serving-certs" // pkg/cert/cert.go certDir, fixed
	waitFor(t, "the operator's certificate", 60*time.Second, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Secrets("kubeflow").Get(ctx, "training-operator-webhook-cert", metav1.GetOptions{})
		if err != nil || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 || len(s.Data["ca.crt"]) == 0 {
			return false, err
		}
		if err := os.MkdirAll(certDir, 0o700); err != nil {
			return false, err
		}
		for k, v := range s.Data {
			if err := os.WriteFile(filepath.Join(certDir, k), v, 0o600); err != nil {
				return false, err
			}
		}
		return true, nil
	})

	injected := injectOffline(t, dir, trainingJob)
	run(injected, "create", "-f", "-")

	want := map[string]corev1.RestartPolicy{"master": corev1.RestartPolicyNever, "worker": corev1.RestartPolicyOnFailure}
	var pods []corev1.Pod
	waitFor(t, "the operator's pods", 90*time.Second, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=pt"})
		if err != nil {
			return false, err
		}
		pods = l.Items
		return len(pods) == 2, nil
	})
	t.Logf("operator log:\n%s", tail(logs.String(), 15))
	for _, p := range pods {
		role := p.Labels["training.kubeflow.org/replica-type"]
		got := podRestartPolicy(t, p, "pytorch")
		t.Logf("%s (%s): pod restartPolicy %s, podRestartPolicy %s", p.Name, role, p.Spec.RestartPolicy, got)
		if p.Spec.RestartPolicy != want[role] || got != string(p.Spec.RestartPolicy) {
			t.Errorf("%s: the controller set restartPolicy %s, the injector wrote podRestartPolicy %s; want both %s",
				p.Name, p.Spec.RestartPolicy, got, want[role])
		}
	}
}

// The RayCluster of TestKubeRayPodPolicy: in-tree autoscaling at v2, a
// head and one worker group whose Ray containers carry rules.
const rayCluster = `apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc, namespace: default}
spec:
  rayVersion: "2.46.0"
  enableInTreeAutoscaling: true
  autoscalerOptions: {version: v2}
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: registry.test/ray:2
          command: [ray, start, --head, --block]
          restartPolicy: Never
          restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]
  workerGroupSpecs:
  - groupName: w
    replicas: 1
    minReplicas: 1
    maxReplicas: 1
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: registry.test/ray:2
          command: [ray, start, --block]
          restartPolicy: Never
          restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [1]}}]
`

// TestKubeRayPodPolicy runs the KubeRay operator v1.5.0 (built from the
// module proxy) on a real API server over a RayCluster injected offline,
// autoscaler v2: the head and worker pods it creates have restartPolicy
// Never (controllers/ray/common/pod.go), and so has each wrapped
// container's podRestartPolicy (injector/podpolicy.go). Before, the
// injector wrote the template's Always.
func TestKubeRayPodPolicy(t *testing.T) {
	assets := kubeAssets(t)
	kr := builtController(t, "kuberay.sh")
	env, client := startAPIServer(t, assets, true)
	dir := t.TempDir()
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}})
	kubectl := filepath.Join(assets, "kubectl")
	applyCRD(t, kubectl, admin, filepath.Join(kr, "crds", "ray.io_rayclusters.yaml"), "rayclusters.ray.io")
	logs := runProcess(t, "ray-operator", filepath.Join(kr, "ray-operator"), "--kubeconfig="+admin, "--enable-leader-election=false",
		fmt.Sprintf("--metrics-addr=127.0.0.1:%d", freePort(t)), fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", freePort(t)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ray-operator:\n%s", tail(logs.String(), 40))
		}
	})
	create := exec.Command(kubectl, "--kubeconfig", admin, "create", "-f", "-")
	create.Stdin = strings.NewReader(injectOffline(t, dir, rayCluster))
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
	var pods []corev1.Pod
	waitFor(t, "the operator's pods", 90*time.Second, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=rc"})
		if err != nil {
			return false, err
		}
		pods = l.Items
		return len(pods) == 2, nil
	})
	for _, p := range pods {
		container := "ray-worker"
		if p.Labels["ray.io/node-type"] == "head" {
			container = "ray-head"
		}
		got := podRestartPolicy(t, p, container)
		t.Logf("%s: pod restartPolicy %s, podRestartPolicy %s", p.Name, p.Spec.RestartPolicy, got)
		if p.Spec.RestartPolicy != corev1.RestartPolicyNever || got != string(p.Spec.RestartPolicy) {
			t.Errorf("%s: the operator set restartPolicy %s, the injector wrote podRestartPolicy %s; want both Never", p.Name, p.Spec.RestartPolicy, got)
		}
	}
}
