// Package apiserver_test checks the admission webhook through a real
// kube-apiserver: the project's own MutatingWebhookConfiguration (from
// deploy/), its matchConditions, failurePolicy and reinvocation, the API
// server's PodSecurity admission on injected pods, the native-mode detection
// and the self-managed certificate mode. It runs once with the
// ContainerRestartRules gate off and once with it on.
package apiserver_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

const (
	webhookNamespace = "restart-supervisor"
	supervisorImage  = "example.test/restart-supervisor:e2e"
)

// runningWebhook is the real server, in-process, on 127.0.0.1.
type runningWebhook struct {
	URL     string
	Metrics *webhook.Metrics
	stop    func()
}

// reviews is the number of AdmissionReviews the server has answered.
func (w *runningWebhook) reviews(t testing.TB) float64 {
	var total float64
	for _, r := range []string{webhook.ResultInjected, webhook.ResultUntouched, webhook.ResultWarned, webhook.ResultDenied, webhook.ResultBadInput} {
		var m dto.Metric
		if err := w.Metrics.Reviews.WithLabelValues(r).Write(&m); err != nil {
			t.Fatal(err)
		}
		total += m.GetCounter().GetValue()
	}
	return total
}

func startWebhook(t *testing.T, certDir string, ln net.Listener, log *slog.Logger, fields webhook.FieldState) *runningWebhook {
	t.Helper()
	return startWebhookWith(t, certDir, ln, log, fields, nil)
}

// startWebhookWith is startWebhook requiring client certificates signed by
// clientCAs when it is not nil.
func startWebhookWith(t *testing.T, certDir string, ln net.Listener, log *slog.Logger, fields webhook.FieldState, clientCAs *x509.CertPool) *runningWebhook {
	t.Helper()
	return startWebhookOpts(t, certDir, ln, log, fields, clientCAs, injector.Options{SupervisorImage: supervisorImage})
}

// startWebhookOpts is startWebhookWith with the injector's options (a
// registry to look images up in).
func startWebhookOpts(t *testing.T, certDir string, ln net.Listener, log *slog.Logger, fields webhook.FieldState, clientCAs *x509.CertPool, opts injector.Options) *runningWebhook {
	t.Helper()
	m := webhook.NewMetrics()
	certs := webhook.NewCertWatcher(certDir, log, nil)
	if err := certs.Load(); err != nil {
		t.Fatal(err)
	}
	h := &webhook.Handler{
		Mutator:    injector.New(opts),
		Entrypoint: webhook.EntrypointDeny,
		Native:     webhook.NativeOff,
		Fields:     fields,
		Metrics:    m,
		Log:        log,
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &webhook.Server{Handler: h, Certs: certs, Metrics: m, Log: log, ShutdownTimeout: 10 * time.Second, ClientCAs: clientCAs}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, hl) }()
	go func() { _ = certs.Watch(ctx) }()
	w := &runningWebhook{URL: "https://" + ln.Addr().String() + "/mutate", Metrics: m}
	stopped := false
	w.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook server: %v", err)
		}
	}
	t.Cleanup(w.stop)
	return w
}

func TestWebhookThroughAPIServer(t *testing.T) {
	assets := kubeAssets(t)
	for _, gate := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContainerRestartRules=%v", gate), func(t *testing.T) {
			runAgainstAPIServer(t, assets, gate)
		})
	}
}

func runAgainstAPIServer(t *testing.T, assets string, gate bool) {
	_, client := startAPIServer(t, assets, gate)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))

	for _, ns := range []string{webhookNamespace, "apps"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	var caBundle []byte
	var selfManaged *webhook.SelfManaged
	if gate {
		// Self-managed certificates: the configuration is registered
		// without a caBundle and the webhook fills it in.
		selfManaged = &webhook.SelfManaged{Client: client, Namespace: webhookNamespace, CASecret: "restart-injector-ca",
			WebhookConfig: "restart-injector", IPs: []string{"127.0.0.1"}, Dir: certDir}
	} else {
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
		caBundle = ca.CertPEM
	}
	url := "https://" + ln.Addr().String() + "/mutate"
	mwc := projectWebhookConfig(t, url, caBundle)
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register deploy/base/webhook.yaml: %v", err)
	}
	if selfManaged != nil {
		checkSelfManaged(t, ctx, client, selfManaged)
	}
	// What the server learns at start: does this API server keep the fields?
	detector := &webhook.NativeDetector{Client: client, Namespace: webhookNamespace, Log: log}
	if _, _, err := detector.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if kept, known := detector.FieldsKept(); !known || kept != gate {
		t.Fatalf("gate %v: API server keeps the fields = %v (known %v)", gate, kept, known)
	}
	wh := startWebhook(t, certDir, ln, log, detector)

	// Configurations reach the admission chain through an informer: wait
	// until a dry-run create of a pod with rules comes back injected.
	waitFor(t, "the webhook configuration to take effect", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && injected(p), err
	})

	t.Run("native fields are translated and removed", func(t *testing.T) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("native"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertInjected(t, p, "trainer")
		cfg := envOf(p.Spec.Containers[0], contract.EnvConfig)
		if !strings.Contains(cfg, `"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]`) {
			t.Errorf("%s = %s", contract.EnvConfig, cfg)
		}
		if c := p.Spec.Containers[1]; len(c.Command) != 1 || c.Command[0] != "/exporter" || len(c.VolumeMounts) != 0 {
			t.Errorf("container without rules was changed: %+v", c)
		}
	})

	t.Run("deployment template", func(t *testing.T) {
		d := deploymentOf(nativeRulesPod("web"))
		stored, err := client.AppsV1().Deployments("apps").Create(ctx, d, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tmplRules := stored.Spec.Template.Spec.Containers[0].RestartPolicyRules
		carried := stored.Spec.Template.Annotations[contract.AnnotationRules]
		if !gate {
			// The API server drops the fields from a stored template with the
			// gate off; the template webhook copied them into the annotation
			// first.
			if len(tmplRules) != 0 {
				t.Fatalf("gate off, yet the template kept restartPolicyRules: %v", tmplRules)
			}
			if !strings.Contains(carried, `"trainer":{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`) {
				t.Fatalf("gate off: template annotation = %q", carried)
			}
		} else if len(tmplRules) == 0 || carried != "" {
			t.Fatalf("gate on: template rules %v, annotation %q; want the fields kept and no annotation", tmplRules, carried)
		}
		// A CronJob's template sits deeper; the same CEL and handler find it.
		job := nativeRulesPod("nightly")
		job.Name = ""
		cron := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: job.ObjectMeta, Spec: job.Spec}}}}}
		storedCron, err := client.BatchV1().CronJobs("apps").Create(ctx, cron, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := storedCron.Spec.JobTemplate.Spec.Template.Annotations[contract.AnnotationRules]; (got != "") == gate {
			t.Errorf("gate %v: CronJob template annotation %q", gate, got)
		}

		// What the ReplicaSet controller does: a Pod from the template.
		p := &corev1.Pod{ObjectMeta: *stored.Spec.Template.ObjectMeta.DeepCopy(), Spec: *stored.Spec.Template.Spec.DeepCopy()}
		p.GenerateName = stored.Name + "-"
		got, err := client.CoreV1().Pods("apps").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertInjected(t, got, "trainer")
	})

	t.Run("annotation carrier", func(t *testing.T) {
		p, err := client.CoreV1().Pods("apps").Create(ctx, annotatedPod("annotated"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertInjected(t, p, "trainer")
	})

	t.Run("pod without rules is not even sent", func(t *testing.T) {
		before := wh.reviews(t)
		in := plainPod("plain")
		p, err := client.CoreV1().Pods("apps").Create(ctx, in, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) != 0 || len(p.Spec.Volumes) != 0 || p.Annotations[contract.AnnotationStatus] != "" ||
			len(p.Spec.Containers[0].Command) != 1 || p.Spec.Containers[0].Command[0] != "/app" {
			t.Errorf("pod without rules changed: %+v", p.Spec)
		}
		if after := wh.reviews(t); after != before {
			t.Errorf("webhook called %v times for a pod without rules; matchConditions should have kept it away", after-before)
		}
	})

	t.Run("invalid rules are refused", func(t *testing.T) {
		p := nativeRulesPod("invalid")
		p.Spec.Containers[0].RestartPolicyRules[0].ExitCodes.Operator = "Between"
		_, err := client.CoreV1().Pods("apps").Create(ctx, p, metav1.CreateOptions{})
		want := `admission webhook "inject.restart-supervisor.dev" denied the request: ` +
			`pod "apps/invalid": spec.containers[0].restartPolicyRules[0].exitCodes.operator: Unsupported value: "Between"`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error = %v\nwant it to contain %s", err, want)
		}
		if !apierrors.IsInvalid(err) {
			t.Errorf("reason = %v, want Invalid (422)", apierrors.ReasonForError(err))
		}
		t.Logf("API server answer: %v", err)
	})

	t.Run("restricted namespace admits the injected pod", func(t *testing.T) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted", Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The enforcement is real: the same pod without its security context is refused.
		loose := nativeRulesPod("loose")
		if _, err := client.CoreV1().Pods("restricted").Create(ctx, loose, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
			t.Fatalf("unrestricted pod in a restricted namespace: %v", err)
		}
		p, err := client.CoreV1().Pods("restricted").Create(ctx, restricted(nativeRulesPod("strict")), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("injected restricted pod refused: %v", err)
		}
		assertInjected(t, p, "trainer")
	})

	t.Run("idempotent: created twice and reinvoked", func(t *testing.T) {
		first, err := client.CoreV1().Pods("apps").Create(ctx, annotatedPod("twice"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "twice-again", Labels: first.Labels, Annotations: first.Annotations}, Spec: *first.Spec.DeepCopy()}
		second, err := client.CoreV1().Pods("apps").Create(ctx, again, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		assertInjected(t, second, "trainer")
		if fmt.Sprint(second.Spec.Containers[0].Command) != fmt.Sprint(first.Spec.Containers[0].Command) {
			t.Errorf("command changed on the second pass:\n%q\n%q", first.Spec.Containers[0].Command, second.Spec.Containers[0].Command)
		}

		// A second webhook (a copy of ours, ordered after it) mutates every
		// ruled pod; with reinvocationPolicy IfNeeded ours runs again on
		// the already-injected pod.
		other := projectWebhookConfig(t, wh.URL, caBundleOf(t, client, "restart-injector"))
		other.Name = "zz-second-injector"
		other.Webhooks[0].Name = "second.restart-supervisor.dev"
		if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, other.Name, metav1.DeleteOptions{})
		before := wh.reviews(t)
		var p *corev1.Pod
		waitFor(t, "the second webhook to be called", 30*time.Second, func(ctx context.Context) (bool, error) {
			before = wh.reviews(t)
			pod := annotatedPod("reinvoked")
			pod.GenerateName, pod.Name = "reinvoked-", ""
			got, err := client.CoreV1().Pods("apps").Create(ctx, pod, metav1.CreateOptions{})
			p = got
			return err == nil && wh.reviews(t)-before >= 2, err
		})
		assertInjected(t, p, "trainer")
	})

	t.Run("webhook down: failurePolicy Fail only within matchConditions", func(t *testing.T) {
		wh.stop()
		if _, err := client.CoreV1().Pods("apps").Create(ctx, plainPod("plain-while-down"), metav1.CreateOptions{}); err != nil {
			t.Errorf("pod without rules refused while the webhook is down: %v", err)
		}
		_, err := client.CoreV1().Pods("apps").Create(ctx, nativeRulesPod("ruled-while-down"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "inject.restart-supervisor.dev"`) {
			t.Errorf("pod with rules while the webhook is down: %v", err)
		}
		t.Logf("API server answer: %v", err)
	})

	t.Run("native detection", func(t *testing.T) {
		d := &webhook.NativeDetector{Client: client, Namespace: webhookNamespace, Log: log}
		ok, why, err := d.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok || (!gate && !strings.Contains(why, "drops restartPolicyRules")) || (gate && !strings.Contains(why, "no nodes")) {
			t.Fatalf("no nodes, gate %v: honoured=%v (%s)", gate, ok, why)
		}
		addNode(t, client, "node-new", "v1.35.4")
		ok, why, _ = d.Check(ctx)
		if ok != gate {
			t.Errorf("1.35 kubelet, gate %v: honoured=%v (%s)", gate, ok, why)
		}
		addNode(t, client, "node-old", "v1.34.4")
		if ok, why, _ = d.Check(ctx); ok {
			t.Errorf("with a 1.34 kubelet: honoured (%s)", why)
		} else if gate && !strings.Contains(why, "node-old (v1.34.4)") {
			t.Errorf("reason does not name the old node: %s", why)
		}
		t.Logf("conclusion: %s", why)
	})
}

// checkSelfManaged runs two replicas' worth of self-managed certificate
// setup against the API server: one CA, stored once, in the caBundle.
func checkSelfManaged(t *testing.T, ctx context.Context, client kubernetes.Interface, sm *webhook.SelfManaged) {
	t.Helper()
	ca, _, err := sm.Start(ctx)
	if err != nil {
		t.Fatalf("self-managed start: %v", err)
	}
	replica2 := *sm
	replica2.Dir = t.TempDir()
	ca2, _, err := replica2.Start(ctx)
	if err != nil {
		t.Fatalf("second replica: %v", err)
	}
	if string(ca.CertPEM) != string(ca2.CertPEM) {
		t.Fatal("replicas disagree on the CA")
	}
	if got := caBundleOf(t, client, sm.WebhookConfig); string(got) != string(ca.CertPEM) {
		t.Fatalf("caBundle not patched: %q", got)
	}
	for _, f := range []string{webhook.CertFile, webhook.KeyFile, webhook.CAFile} {
		if _, err := os.Stat(filepath.Join(sm.Dir, f)); err != nil {
			t.Fatal(err)
		}
	}

	// Renewal: 340 days on, the serving certificate is inside its renewal
	// window and is replaced; a blanked caBundle (a re-applied manifest) is
	// written again.
	blank := `[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]`
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, sm.WebhookConfig, types.JSONPatchType, []byte(blank), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	later := *sm
	later.Dir = t.TempDir()
	ca3, serving, err := later.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := serving.NotAfter()
	later.Now = func() time.Time { return time.Now().Add(340 * 24 * time.Hour) }
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		later.Maintain(mctx, ca3, serving, 20*time.Millisecond, func(err error) { t.Errorf("maintain: %v", err) })
	}()
	waitFor(t, "the serving certificate to be renewed", 10*time.Second, func(context.Context) (bool, error) {
		b, err := os.ReadFile(filepath.Join(later.Dir, webhook.CertFile))
		if err != nil {
			return false, err
		}
		return (webhook.KeyPair{CertPEM: b}).NotAfter().After(before), nil
	})
	cancel()
	<-maintained
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, sm.WebhookConfig, types.JSONPatchType, []byte(blank), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sm.PatchCABundle(ctx, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	if got := caBundleOf(t, client, sm.WebhookConfig); string(got) != string(ca.CertPEM) {
		t.Fatal("caBundle not restored after being blanked")
	}
}

func caBundleOf(t testing.TB, client kubernetes.Interface, name string) []byte {
	mwc, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return mwc.Webhooks[0].ClientConfig.CABundle
}

// addNode creates a node object whose status says kubelet and, as a
// kubelet with NodeDeclaredFeatures does, declares the features given (an
// API server without the field drops them).
func addNode(t testing.TB, client kubernetes.Interface, name, kubelet string, declared ...string) {
	addNodeWith(t, client, name, func(st *corev1.NodeStatus) {
		st.NodeInfo.KubeletVersion, st.DeclaredFeatures = kubelet, declared
	})
}

// addNodeWith creates node name and sets its status as status says.
func addNodeWith(t testing.TB, client kubernetes.Interface, name string, status func(*corev1.NodeStatus)) {
	ctx := context.Background()
	n, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status(&n.Status)
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func injected(p *corev1.Pod) bool {
	return len(p.Spec.InitContainers) > 0 && p.Spec.InitContainers[0].Name == contract.InstallContainer
}

func assertInjected(t testing.TB, p *corev1.Pod, container string) {
	t.Helper()
	installs := 0
	for _, c := range p.Spec.InitContainers {
		if c.Name == contract.InstallContainer {
			installs++
		}
	}
	if installs != 1 || !injected(p) {
		t.Fatalf("pod %s: want exactly one %s first among init containers, got %v", p.Name, contract.InstallContainer, names(p.Spec.InitContainers))
	}
	if p.Spec.InitContainers[0].Image != supervisorImage {
		t.Errorf("install image %q", p.Spec.InitContainers[0].Image)
	}
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		if len(c.Command) == 0 || c.Command[0] != contract.SupervisorPath {
			t.Errorf("pod %s container %s: command %q not wrapped", p.Name, c.Name, c.Command)
		}
		if c.RestartPolicy != nil || len(c.RestartPolicyRules) != 0 {
			t.Errorf("pod %s container %s: native fields left in place", p.Name, c.Name)
		}
		return
	}
	t.Fatalf("pod %s has no container %s", p.Name, container)
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func nativeRulesPod(name string) *corev1.Pod {
	never := corev1.ContainerRestartPolicyNever
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "trainer", Image: "registry.test/trainer:1", Command: []string{"/train", "--resume"},
				RestartPolicy: &never,
				RestartPolicyRules: []corev1.ContainerRestartRule{{
					Action:    corev1.ContainerRestartRuleActionRestart,
					ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}},
				}},
			}, {
				Name: "exporter", Image: "registry.test/exporter:1", Command: []string{"/exporter"},
			}},
		},
	}
}

func annotatedPod(name string) *corev1.Pod {
	p := nativeRulesPod(name)
	p.Spec.Containers[0].RestartPolicy, p.Spec.Containers[0].RestartPolicyRules = nil, nil
	rules, _ := json.Marshal(map[string]any{"trainer": map[string]any{
		"restartPolicy":      "Never",
		"restartPolicyRules": []any{map[string]any{"action": "Restart", "exitCodes": map[string]any{"operator": "In", "values": []int{42}}}},
	}})
	p.Annotations = map[string]string{contract.AnnotationRules: string(rules)}
	return p
}

func plainPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "app", Image: "registry.test/app:1", Command: []string{"/app"}}},
		},
	}
}

func restricted(p *corev1.Pod) *corev1.Pod {
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	return p
}

func deploymentOf(p *corev1.Pod) *appsv1.Deployment {
	labels := map[string]string{"app": p.Name}
	name := p.Name
	p.Labels, p.Name = labels, ""
	// A Deployment's pods always restart; the container-level policy and
	// rules are what say otherwise.
	p.Spec.RestartPolicy = corev1.RestartPolicyAlways
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: *p.Spec.DeepCopy()},
		},
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
