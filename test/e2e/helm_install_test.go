package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// helmRelease is the release every step below names: what README's "On
// Kubernetes" installs, in a namespace that is not the chart's default.
const (
	helmRelease   = "restart-injector"
	helmNamespace = "other"
)

// TestHelmInstallFromBuiltImages does on the real node what README's "On
// Kubernetes" tells a user who did not build the project: `make images`,
// `make push` to their registry (one on loopback here, go-containerregistry's),
// `helm install -n other` with both images pinned by the digests `make push`
// printed, then `helm test`. The node pulls both images by digest from that
// registry: the webhook runs as the release's Deployment and injects a ruled
// pod, whose install container and supervisor come from the pinned image.
//
// The webhook runs in the chart's hostNetwork variant, with
// webhook.extraEnv naming the API server's loopback address: this node has
// no kube-proxy, so neither the API server's Service address (10.0.0.1) nor
// a pod address outside the host's network reaches the API server, which
// listens on 127.0.0.1 only; the API server calls the webhook's Service
// through its EndpointSlice (cluster.Options.Workloads). The images are
// built for this machine's platform only, to keep the run short; both
// platforms of the index are hack/images' TestBuildAndPush.
func TestHelmInstallFromBuiltImages(t *testing.T) {
	repo, binDir := prepareNode(t)
	helm := e2eHelm(t, repo)

	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	prefix := strings.TrimPrefix(reg.URL, "http://") + "/team" // 127.0.0.1:PORT/team
	pinned := buildAndPushImages(t, repo, prefix)
	t.Logf("pinned: %v", pinned)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, Workloads: true, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	apiPort := c.APIServer[strings.LastIndex(c.APIServer, ":")+1:]

	injector, supervisor := pinned["restart-injector"], pinned["restart-supervisor"]
	injRepo, injDigest, _ := strings.Cut(injector, "@")
	supRepo, supDigest, _ := strings.Cut(supervisor, "@")
	extraEnv, _ := json.Marshal([]corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: "127.0.0.1"}, {Name: "KUBERNETES_SERVICE_PORT", Value: apiPort}})
	start := time.Now()
	if out, err := helm.run(c, "install", helmRelease, filepath.Join(repo, "charts", "restart-injector"),
		"-n", helmNamespace, "--create-namespace", "--wait", "--timeout", "5m",
		"--set", "image.repository="+injRepo+",image.digest="+injDigest,
		"--set", "supervisorImage.repository="+supRepo+",supervisorImage.digest="+supDigest,
		"--set", "certificates.source=self,webhook.hostNetwork=true,webhook.replicas=1",
		"--set-json", "webhook.extraEnv="+string(extraEnv)); err != nil {
		describeRelease(t, c)
		t.Fatalf("helm install: %v", err)
	} else {
		t.Logf("helm install -n %s: ready in %s\n%s", helmNamespace, time.Since(start).Round(100*time.Millisecond), lastLines(out, 12))
	}

	// Every namespaced object of the release is in the release's namespace.
	manifest, err := helm.run(c, "get", "manifest", helmRelease, "-n", helmNamespace)
	if err != nil {
		t.Fatal(err)
	}
	if wrong := outsideNamespace(t, manifest, helmNamespace); len(wrong) > 0 {
		t.Errorf("helm install -n %s put %v elsewhere", helmNamespace, wrong)
	}

	// The webhook's pod runs the injector image the node pulled by digest.
	checkWebhookPod(ctx, t, c, injector)

	start = time.Now()
	if out, err := helm.run(c, "test", helmRelease, "-n", helmNamespace, "--timeout", "3m"); err != nil {
		describeRelease(t, c)
		t.Fatalf("helm test: %v", err)
	} else {
		t.Logf("helm test: passed in %s\n%s", time.Since(start).Round(100*time.Millisecond), lastLines(out, 8))
	}

	// A ruled pod of the user's own, sent to the webhook: injected with the
	// pinned supervisor image, and restarted in place on its rule.
	runRuledPod(ctx, t, c, supervisor)
}

// buildAndPushImages runs `make images` and `make push` as README's "On
// Kubernetes" gives them, into a directory of the test's own, and returns
// the pinned references push printed, by image name.
func buildAndPushImages(t *testing.T, repo, prefix string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	vars := []string{"IMAGE_LAYOUT=" + filepath.Join(dir, "images"), "IMAGE_BIN=" + filepath.Join(dir, "bin"),
		"IMAGE_PLATFORMS=linux/" + runtime.GOARCH}
	start := time.Now()
	make1 := func(args ...string) []byte {
		cmd := exec.Command("make", append(append([]string{"-s", "-C", repo}, args...), vars...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("make %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
		}
		return out
	}
	built := make1("images")
	t.Logf("make images in %s:\n%s", time.Since(start).Round(time.Second), strings.TrimSpace(string(built)))
	out := make1("push", "REGISTRY="+prefix, "INSECURE=1")
	ref := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `/(restart-supervisor|restart-injector)@sha256:[0-9a-f]{64}$`)
	pinned := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if m := ref.FindStringSubmatch(line); m != nil {
			pinned[m[1]] = line
		}
	}
	if len(pinned) != 2 {
		t.Fatalf("make push printed %q, want a pinned reference for each image", out)
	}
	// push pins exactly the indexes images built.
	for name, p := range pinned {
		_, digest, _ := strings.Cut(p, "@")
		if !strings.Contains(string(built), name+":") || !strings.Contains(string(built), digest) {
			t.Errorf("make push pinned %s, which make images did not print:\n%s", p, built)
		}
	}
	return pinned
}

// checkWebhookPod: the release's webhook pod runs ref, pulled by digest.
func checkWebhookPod(ctx context.Context, t *testing.T, c *cluster.Cluster, ref string) {
	t.Helper()
	dep, err := c.Client.AppsV1().Deployments(helmNamespace).Get(ctx, helmRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release's Deployment in %s: %v", helmNamespace, err)
	}
	pods, err := c.Client.CoreV1().Pods(helmNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set(dep.Spec.Selector.MatchLabels).String()})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the webhook's pods: %v (%d)", err, len(pods.Items))
	}
	_, digest, _ := strings.Cut(ref, "@")
	for _, p := range pods.Items {
		if img := p.Spec.Containers[0].Image; img != ref {
			t.Errorf("pod %s runs %s, want %s", p.Name, img, ref)
		}
		for _, st := range p.Status.ContainerStatuses {
			if !st.Ready || !strings.HasSuffix(st.ImageID, digest) {
				t.Errorf("pod %s container %s: ready %v, imageID %q, want the digest %s", p.Name, st.Name, st.Ready, st.ImageID, digest)
			}
		}
	}
}

// runRuledPod creates a pod whose container exits 42 once, with a rule
// that restarts 42: the webhook must have wrapped it with supervisor (the
// install container's image), and the pod ends Succeeded with the kubelet's
// restartCount 0, the restart done in place.
func runRuledPod(ctx context.Context, t *testing.T, c *cluster.Cluster, supervisor string) {
	t.Helper()
	never := corev1.ContainerRestartPolicyNever
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ruled", Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: new(bool),
			Volumes: []corev1.Volume{{Name: "mark", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{
				Name: "work", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command:       []string{"sh", "-c", "[ -e /mark/ran ] && exit 0; touch /mark/ran; exit 42"},
				VolumeMounts:  []corev1.VolumeMount{{Name: "mark", MountPath: "/mark"}},
				RestartPolicy: &never, RestartPolicyRules: []corev1.ContainerRestartRule{{
					Action: corev1.ContainerRestartRuleActionRestart,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{
						Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}},
			}}},
	}
	// v1.34.4's API server drops the fields with the gate off; the
	// annotation carries them, as `inject` writes for such clusters.
	if err := cluster.RulesToAnnotation(&pod.ObjectMeta, &pod.Spec); err != nil {
		t.Fatal(err)
	}
	got, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the ruled pod: %v", err)
	}
	if _, ok := got.Annotations[contract.AnnotationStatus]; !ok || len(got.Spec.InitContainers) == 0 ||
		got.Spec.InitContainers[0].Image != supervisor {
		t.Fatalf("the ruled pod was not injected with %s: annotations %v, init containers %v", supervisor, got.Annotations, got.Spec.InitContainers)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			var restarts int32
			for _, st := range p.Status.ContainerStatuses {
				restarts += st.RestartCount
			}
			if p.Status.Phase != corev1.PodSucceeded || restarts != 0 {
				t.Fatalf("the ruled pod ended %s with restartCount %d, want Succeeded and 0 (restarted in place)", p.Status.Phase, restarts)
			}
			t.Logf("the ruled pod, injected with %s, exited 42, was restarted in place and Succeeded", supervisor)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ruled pod still %s after 2 min: %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// outsideNamespace names the namespaced objects of a helm manifest that are
// not in ns (the helm test hook, in tests.namespace, is not in `get manifest`).
func outsideNamespace(t *testing.T, manifest []byte, ns string) []string {
	t.Helper()
	clusterScoped := map[string]bool{"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
		"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true, "PriorityClass": true}
	var wrong []string
	n := 0
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := dec.Decode(&obj); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("helm get manifest: %v", err)
		}
		if obj.Kind == "" || clusterScoped[obj.Kind] {
			continue
		}
		n++
		if obj.Metadata.Namespace != ns {
			wrong = append(wrong, fmt.Sprintf("%s %s/%s", obj.Kind, obj.Metadata.Namespace, obj.Metadata.Name))
		}
	}
	if n == 0 {
		t.Fatalf("helm get manifest holds no namespaced object:\n%s", manifest)
	}
	return wrong
}

// describeRelease logs what a failed install or test left: the pods of the
// release's namespace and of default, and the namespace's Events.
func describeRelease(t *testing.T, c *cluster.Cluster) {
	ctx := context.Background()
	for _, ns := range []string{helmNamespace, "default"} {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			b, _ := json.Marshal(p.Status)
			t.Logf("pod %s/%s on %q: %s", ns, p.Name, p.Spec.NodeName, b)
		}
		events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, e := range events.Items {
				t.Logf("event %s/%s %s: %s %s", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
			}
		}
	}
	t.Logf("kube-scheduler: %s", lastLines([]byte(tailFile(c.LogPath("kube-scheduler"))), 10))
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// e2eHelmRunner runs hack/helm.sh's helm with its own configuration, cache
// and data directories, against the cluster's kubeconfig.
type e2eHelmRunner struct{ bin, home string }

func e2eHelm(t *testing.T, repo string) e2eHelmRunner {
	t.Helper()
	bin, err := testutil.HelmBinary(repo, testWriter{t})
	if err != nil {
		unavailable(t, "%v", err)
	}
	return e2eHelmRunner{bin: bin, home: t.TempDir()}
}

func (h e2eHelmRunner) run(c *cluster.Cluster, args ...string) ([]byte, error) {
	cmd := exec.Command(h.bin, append(args, "--kubeconfig", c.Kubeconfig)...)
	cmd.Env = testutil.HelmEnv(h.home)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return o.Bytes(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, o.Bytes(), e.Bytes())
	}
	return o.Bytes(), nil
}
