package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/imagelookup/registry"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil/testregistry"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

// webhookMemoryLimit is the chart's memory limit of the webhook container
// (values.yaml webhook.resources.limits.memory).
const webhookMemoryLimit = 256 << 20

// TestHostilePodsThroughAPIServer sends the pods of #28's H1 and H2, which
// any namespace editor may create, through a real kube-apiserver to the
// webhook, and measures both: the API server's peak RSS over the attack
// (VmHWM, reset before each) and the webhook's peak heap (sampled). Before
// the bounds, one H1 pod took the API server from 258 MiB to 1.15 GB and four
// at once to 3.0 GB, and one H2 pod the webhook to 1.96 GB and the API
// server to 4.6 GB. Now each is denied with the bound it passed, and the
// largest pod that is admitted (contract.MaxPodMembers members) stays
// within the webhook's memory limit.
func TestHostilePodsThroughAPIServer(t *testing.T) {
	assets := kubeAssets(t)
	env, client := startAPIServer(t, assets, true)
	ctx := context.Background()
	apiPID := apiServerPID(t, env)
	for _, ns := range []string{webhookNamespace, "apps"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// H2's registry: an index of 32 platforms, each config within the
	// lookup's caps, each holding an entrypoint of 1000 KiB.
	tr := testregistry.New(t)
	big := strings.Repeat("A", 1000<<10)
	var platforms []testregistry.PlatformImage
	for i := range 32 {
		p := v1.Platform{OS: "linux", Architecture: fmt.Sprintf("arch%d", i)}
		platforms = append(platforms, testregistry.PlatformImage{Platform: p,
			Img: testregistry.Image(t, "linux", p.Architecture, []string{fmt.Sprintf("/%d", i), big}, nil)})
	}
	tr.PushIndex(t, "registry.test/huge:1", testregistry.Index(platforms...))

	ca, err := webhook.NewCA("hostile-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	if err := webhook.WriteKeyPair(certDir, serving, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startWebhookOpts(t, certDir, ln, log, nil, nil, injector.Options{SupervisorImage: supervisorImage,
		Resolver: registry.New(registry.Options{Transport: tr.Transport, Timeout: time.Minute})})
	mwc := projectWebhookConfig(t, "https://"+ln.Addr().String()+"/mutate", ca.CertPEM)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the webhook configuration to take effect", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && injected(p), err
	})

	// As a namespace editor: the attacker of #28.
	editor := kubeconfigFor(t, env, t.TempDir(), "editor", envtest.User{Name: "mallory"})
	bindEdit(t, client, "apps", "mallory")
	ed := clientFor(t, editor)

	heap := startHeapSampler(t)
	for _, tc := range []struct {
		name    string
		pod     func(i int) *corev1.Pod
		n       int
		wantErr string // "" for admitted
	}{
		{"H1: 2000 members", func(i int) *corev1.Pod { return restartAllPod(fmt.Sprintf("h1-%d", i), 2000) }, 1,
			fmt.Sprintf("2000 containers take part in pod restarts (RestartAllContainers), at most %d may", contract.MaxPodMembers)},
		{"H1: 2000 members, 4 at once", func(i int) *corev1.Pod { return restartAllPod(fmt.Sprintf("h1x-%d", i), 2000) }, 4,
			fmt.Sprintf("at most %d may", contract.MaxPodMembers)},
		{"the largest admitted: MaxPodMembers members", func(i int) *corev1.Pod {
			return restartAllPod(fmt.Sprintf("max-%d", i), contract.MaxPodMembers)
		}, 1, ""},
		{"H2: 32 platforms of 1000 KiB entrypoints", func(i int) *corev1.Pod { return lookupPod(fmt.Sprintf("h2-%d", i), "registry.test/huge:1") }, 1,
			"over the cap of 1024 strings and 32 KiB"},
	} {
		resetPeakRSS(t, apiPID)
		before := testutil.ProcStatusKiB(t, apiPID, "VmRSS")
		heap.reset()
		var wg sync.WaitGroup
		errs := make([]error, tc.n)
		for i := range tc.n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = ed.CoreV1().Pods("apps").Create(ctx, tc.pod(i), metav1.CreateOptions{})
			}()
		}
		wg.Wait()
		peak := testutil.ProcStatusKiB(t, apiPID, "VmHWM")
		t.Logf("%s: kube-apiserver RSS %d MiB before, peak %d MiB (+%d); heap peak of this process (webhook, test registry, client) %d MiB",
			tc.name, before>>10, peak>>10, (peak-before)>>10, heap.peak()>>20)
		for i, err := range errs {
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%s #%d: %v", tc.name, i, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("%s #%d: want a denial with %q, got %v", tc.name, i, tc.wantErr, err)
			}
			if err != nil && len(err.Error()) > 1024 {
				t.Errorf("%s #%d: an error of %d bytes", tc.name, i, len(err.Error()))
			}
		}
		if h := heap.peak(); h > webhookMemoryLimit {
			t.Errorf("%s: the webhook's heap peaked at %d MiB, over its limit of %d MiB", tc.name, h>>20, webhookMemoryLimit>>20)
		}
		// Before the bounds: +890 MiB for one H1 pod, +2.3 GB for H2.
		if grew := (peak - before) << 10; grew > 512<<20 {
			t.Errorf("%s: kube-apiserver grew by %d MiB", tc.name, grew>>20)
		}
	}
}

// restartAllPod is a pod of n containers with commands, the first of which
// restarts the whole pod on exit code 88: every container is a member.
func restartAllPod(name string, n int) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}
	for i := range n {
		c := corev1.Container{Name: fmt.Sprintf("member-%05d", i), Image: "example.test/app:1", Command: []string{"/app"}}
		if i == 0 {
			c.RestartPolicy = &never
			c.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestartAllContainers,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{88}}}}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

// lookupPod is one ruled container without command: its entrypoint is
// looked up in image's registry.
func lookupPod(name, image string) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "app", Image: image, RestartPolicy: &never,
			RestartPolicyRules: []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
				ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{75}}}}}}}}
}

// apiServerPID finds env's kube-apiserver process by its secure port.
func apiServerPID(t *testing.T, env *envtest.Environment) int {
	t.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	if err != nil {
		t.Fatal(err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := bytes.Split(b, []byte{0})
		if !bytes.HasSuffix(args[0], []byte("kube-apiserver")) {
			continue
		}
		for _, a := range args {
			if string(a) == "--secure-port="+port {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				return pid
			}
		}
	}
	t.Fatalf("no kube-apiserver process with --secure-port=%s", port)
	return 0
}

// resetPeakRSS resets the kernel's VmHWM of pid to its current RSS
// (proc(5), /proc/pid/clear_refs "5"; root).
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset kube-apiserver's peak RSS (needs root): %v", err)
	}
}

// heapSampler records the largest live heap of this process (the webhook
// runs in it, beside the test's client) every few milliseconds.
type heapSampler struct{ max atomic.Uint64 }

func startHeapSampler(t *testing.T) *heapSampler {
	h := &heapSampler{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for ctx.Err() == nil {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > h.max.Load() {
				h.max.Store(v)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return h
}

func (h *heapSampler) reset()       { h.max.Store(0) }
func (h *heapSampler) peak() uint64 { return h.max.Load() }

// bindEdit gives user what the default edit role gives on pods in
// namespace. A Role of its own: edit is aggregated from other roles by
// kube-controller-manager, which this API server runs without.
func bindEdit(t *testing.T, client kubernetes.Interface, namespace, user string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-editor", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "delete"}}}}
	if _, err := client.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-pod-editor", Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := client.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clientFor is a client of the kubeconfig file.
func clientFor(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 2 * time.Minute
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
