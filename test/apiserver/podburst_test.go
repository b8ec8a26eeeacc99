//go:build podstart

package apiserver_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/webhook"
)

var updatePodBurst = flag.Bool("update-podburst", false, "write docs/podburst-<release>.md from this run")

// burstWebhookMemory is the chart's memory limit of a webhook replica
// (values.yaml webhook.resources.limits.memory): it sizes the reviews in
// flight and GOMEMLIMIT, as on a cluster.
const burstWebhookMemory = "256Mi"

// burstPhase is what one burst of pod creations cost.
type burstPhase struct {
	name, webhook   string
	pods, creators  int
	seconds         float64
	created, denied int
	latency         []time.Duration // client-side Create, per pod
	admission       *dto.Histogram  // the API server's, of the project's webhook (nil without)
	apiCPU          float64         // kube-apiserver's CPU seconds over the burst
	apiPeakMiB      float64
	hookCPU         []float64 // per replica
	hookPeakMiB     []float64
	hookReviews     []float64
	etcdCPU         float64
}

// TestPodBurstThroughAPIServer creates PODBURST_PODS (default 5000) pods
// with restart rules in one burst, PODBURST_CREATORS (default 32) clients
// at once, through a real kube-apiserver and etcd: without the webhook,
// then through two replicas of the built restart-injector (the chart's
// two, each with the chart's 256 MiB memory limit) behind a loopback TCP
// balancer, as a Service spreads connections; then both again at a fifth
// of the pods, to see how each figure grows. The pods are never scheduled
// (no scheduler, no kubelet): the burst is what the API server and the
// webhook see when a Job or JobSet of that many pods is created. Measured:
// pods created per second, Create latency p50/p99 on the client, the API
// server's admission latency of the webhook
// (apiserver_admission_webhook_admission_duration_seconds), the CPU and
// peak RSS of the webhook replicas, of kube-apiserver and of etcd. What it
// asserts: every pod of the webhook's bursts is injected and none is
// denied. Build tag podstart: `make podstart` runs it; -update-podburst
// writes docs/podburst-<release>.md.
func TestPodBurstThroughAPIServer(t *testing.T) {
	pods := envInt("PODBURST_PODS", 5000)
	creators := envInt("PODBURST_CREATORS", 32)
	version := os.Getenv("PODBURST_KUBE_VERSION")
	env, _ := startAPIServer(t, kubeAssetsFor(t, version), true)
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildInjector(t, dir)
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "burst-admin", Groups: []string{"system:masters"}})
	// The test's client is not what is measured: no client-side rate limit.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apiPID, etcdPID := apiServerPID(t, env), etcdPID(t)
	// The webhook's own namespace, and one for the dry-run probes (the
	// webhook leaves its own namespace alone).
	for _, ns := range []string{webhookNamespace, "burst-probe"} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ca, err := webhook.NewCA("burst-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := webhook.NewServingCert(ca, nil, []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(dir, "tls")
	if err := webhook.WriteKeyPair(certDir, serving, ca.CertPEM); err != nil {
		t.Fatal(err)
	}
	var replicas []*exec.Cmd
	var backends, health []string
	for i := range 2 {
		port, healthPort := freePort(t), freePort(t)
		var logs testutil.SyncBuffer
		cmd := exec.Command(bin, "serve", "--cert-mode=files", "--cert-dir="+certDir, "--kubeconfig="+admin,
			"--namespace="+webhookNamespace, fmt.Sprintf("--listen=127.0.0.1:%d", port), fmt.Sprintf("--health-listen=127.0.0.1:%d", healthPort),
			"--native=off", "--supervisor-image="+supervisorImage, "--log-level=warn", "--log-format=text")
		limit := resource.MustParse(burstWebhookMemory)
		cmd.Env = append(os.Environ(), "RESTART_INJECTOR_MEMORY_LIMIT="+strconv.FormatInt(limit.Value(), 10))
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("replica %d logs:\n%s", i, logs.String())
			}
		})
		replicas = append(replicas, cmd)
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", port))
		health = append(health, fmt.Sprintf("http://127.0.0.1:%d", healthPort))
		waitFor(t, fmt.Sprintf("replica %d /readyz", i), time.Minute, func(context.Context) (bool, error) {
			resp, err := httpGet(health[i] + "/readyz")
			return err == nil && resp == 200, err
		})
	}
	balancer := startBalancer(t, backends)

	var phases []*burstPhase
	run := func(name string, n int, withWebhook bool) {
		ns := fmt.Sprintf("burst-%d", len(phases))
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ph := &burstPhase{name: name, pods: n, creators: creators}
		var admissionBefore *dto.Histogram
		if withWebhook {
			ph.webhook = "2 replicas, the chart's 256 MiB limit each"
			admissionBefore = webhookAdmission(t, client)
		}
		var reviewsBefore []float64
		for i, r := range replicas {
			resetPeakRSS(t, r.Process.Pid)
			reviewsBefore = append(reviewsBefore, reviewsOf(t, health[i]))
		}
		resetPeakRSS(t, apiPID)
		apiBefore, etcdBefore := cpuTicks(t, apiPID), cpuTicks(t, etcdPID)
		var hookBefore []uint64
		for _, r := range replicas {
			hookBefore = append(hookBefore, cpuTicks(t, r.Process.Pid))
		}
		ph.latency = make([]time.Duration, n)
		var next atomic.Int64
		var created, denied atomic.Int64
		var firstErr sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for range creators {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return
					}
					pod := burstPod(i)
					t0 := time.Now()
					got, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
					ph.latency[i] = time.Since(t0)
					switch {
					case err != nil:
						denied.Add(1)
						firstErr.Do(func() { t.Errorf("%s: pod %d: %v", name, i, err) })
					case withWebhook && !injected(got):
						firstErr.Do(func() { t.Errorf("%s: pod %d admitted without the supervisor", name, i) })
						created.Add(1)
					default:
						created.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		ph.seconds = time.Since(start).Seconds()
		ph.created, ph.denied = int(created.Load()), int(denied.Load())
		ph.apiCPU = float64(cpuTicks(t, apiPID)-apiBefore) / 100
		ph.etcdCPU = float64(cpuTicks(t, etcdPID)-etcdBefore) / 100
		ph.apiPeakMiB = float64(testutil.ProcStatusKiB(t, apiPID, "VmHWM")) / 1024
		for i, r := range replicas {
			ph.hookCPU = append(ph.hookCPU, float64(cpuTicks(t, r.Process.Pid)-hookBefore[i])/100)
			ph.hookPeakMiB = append(ph.hookPeakMiB, float64(testutil.ProcStatusKiB(t, r.Process.Pid, "VmHWM"))/1024)
			ph.hookReviews = append(ph.hookReviews, reviewsOf(t, health[i])-reviewsBefore[i])
		}
		if withWebhook {
			ph.admission = histogramSince(webhookAdmission(t, client), admissionBefore)
		}
		slices.Sort(ph.latency)
		t.Logf("%s: %d pods in %.1f s (%.0f/s), Create p50 %v p99 %v; webhook admission p50 %s p99 %s; kube-apiserver %.1f CPU-s, peak %.0f MiB; etcd %.1f CPU-s; replicas CPU-s %v, peak MiB %v, reviews %v",
			name, n, ph.seconds, float64(n)/ph.seconds, quantile(ph.latency, 0.5), quantile(ph.latency, 0.99),
			histQuantile(ph.admission, 0.5), histQuantile(ph.admission, 0.99), ph.apiCPU, ph.apiPeakMiB, ph.etcdCPU, ph.hookCPU, ph.hookPeakMiB, ph.hookReviews)
		phases = append(phases, ph)
		t.Logf("connections the balancer handed each replica so far: %v", balancer.handed())
	}

	// setWebhook registers the webhook configuration (on) or removes it,
	// and waits until a dry-run pod shows the API server took it up.
	mwc := projectWebhookConfig(t, "https://"+balancer.addr+"/mutate", ca.CertPEM)
	setWebhook := func(on bool) {
		var err error
		if on {
			_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{})
		} else {
			err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, mwc.Name, metav1.DeleteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("the webhook configuration registered: %v", on), 30*time.Second, func(ctx context.Context) (bool, error) {
			p, err := client.CoreV1().Pods("burst-probe").Create(ctx, burstPod(-1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil && injected(p) == on, err
		})
	}
	for _, n := range []int{pods, max(pods/5, 1)} {
		run("without the webhook", n, false)
		setWebhook(true)
		run("through the webhook", n, true)
		setWebhook(false)
	}

	if *updatePodBurst {
		v, err := client.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		release := v.GitVersion
		doc := podBurstReport(release, balancer.handed(), phases)
		if err := os.WriteFile(filepath.Join(repoRoot(t), "docs", "podburst-"+release+".md"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// burstPod is one pod of an indexed Job of a training job: one trainer
// with a restart rule, one sidecar-free exporter.
func burstPod(i int) *corev1.Pod {
	p := nativeRulesPod(fmt.Sprintf("trainer-%d", i))
	if i < 0 {
		p.Name = "dry-run"
	}
	p.Labels["batch.kubernetes.io/job-name"] = "burst"
	return p
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// etcdPID finds the etcd that envtest started (the only etcd whose parent
// is this test process).
func etcdPID(t *testing.T) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		if !strings.Contains(s, "(etcd)") {
			continue
		}
		fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		if ppid, _ := strconv.Atoi(fields[1]); ppid == os.Getpid() {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			return pid
		}
	}
	t.Fatal("no etcd child of this process")
	return 0
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// reviewsOf is the replica's count of admission reviews answered, from
// its /metrics.
func reviewsOf(t *testing.T, health string) float64 {
	t.Helper()
	families := metricFamilies(t, func() (io.ReadCloser, error) {
		resp, err := http.Get(health + "/metrics")
		if err != nil {
			return nil, err
		}
		return resp.Body, nil
	})
	total := 0.0
	for _, m := range families["restart_injector_admission_reviews_total"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	return total
}

// webhookAdmission is the API server's histogram of the project's
// webhook's admission latency (CREATE, admit), summed over its labels.
func webhookAdmission(t *testing.T, client kubernetes.Interface) *dto.Histogram {
	t.Helper()
	families := metricFamilies(t, func() (io.ReadCloser, error) {
		return client.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(context.Background())
	})
	var sum *dto.Histogram
	for _, m := range families["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["name"] != "inject.restart-supervisor.dev" || labels["operation"] != "CREATE" || labels["type"] != "admit" {
			continue
		}
		h := m.GetHistogram()
		if sum == nil {
			sum = &dto.Histogram{}
			for _, b := range h.GetBucket() {
				sum.Bucket = append(sum.Bucket, &dto.Bucket{UpperBound: ptr.To(b.GetUpperBound()), CumulativeCount: ptr.To[uint64](0)})
			}
			sum.SampleCount, sum.SampleSum = ptr.To[uint64](0), ptr.To[float64](0)
		}
		for i, b := range h.GetBucket() {
			*sum.Bucket[i].CumulativeCount += b.GetCumulativeCount()
		}
		*sum.SampleCount += h.GetSampleCount()
		*sum.SampleSum += h.GetSampleSum()
	}
	if sum == nil {
		sum = &dto.Histogram{SampleCount: ptr.To[uint64](0), SampleSum: ptr.To[float64](0)}
	}
	return sum
}

// histogramSince is now minus before, bucket by bucket.
func histogramSince(now, before *dto.Histogram) *dto.Histogram {
	out := &dto.Histogram{SampleCount: ptr.To(now.GetSampleCount() - before.GetSampleCount()), SampleSum: ptr.To(now.GetSampleSum() - before.GetSampleSum())}
	for i, b := range now.GetBucket() {
		c := b.GetCumulativeCount()
		if i < len(before.GetBucket()) {
			c -= before.GetBucket()[i].GetCumulativeCount()
		}
		out.Bucket = append(out.Bucket, &dto.Bucket{UpperBound: ptr.To(b.GetUpperBound()), CumulativeCount: ptr.To(c)})
	}
	return out
}

// histQuantile is Prometheus's histogram_quantile: linear within the
// bucket that holds the q-th observation, so no finer than the API
// server's buckets (5 ms, 25 ms, 100 ms, 500 ms, 1 s, ...).
func histQuantile(h *dto.Histogram, q float64) string {
	if h == nil || h.GetSampleCount() == 0 {
		return "–"
	}
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if c >= rank {
			v := lower + (b.GetUpperBound()-lower)*(rank-below)/math.Max(c-below, 1)
			return fmt.Sprintf("%.1f ms (bucket ≤ %g ms)", v*1000, b.GetUpperBound()*1000)
		}
		lower, below = b.GetUpperBound(), c
	}
	return fmt.Sprintf("> %g ms", lower*1000)
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)].Round(10 * time.Microsecond)
}

func metricFamilies(t *testing.T, open func() (io.ReadCloser, error)) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(body, 64<<20))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// balancer is a TCP balancer on loopback that hands each new connection to
// the next backend in turn, as a Service's kube-proxy rules spread
// connections (not requests) over its endpoints.
type balancer struct {
	addr  string
	mu    sync.Mutex
	conns []int // connections handed to each backend
}

func startBalancer(t *testing.T, backends []string) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	b := &balancer{addr: ln.Addr().String(), conns: make([]int, len(backends))}
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := n % len(backends)
			b.mu.Lock()
			b.conns[i]++
			b.mu.Unlock()
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", backends[i])
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); done <- struct{}{} }()
				go func() { io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return b
}

// handed is the count of connections handed to each backend so far.
func (b *balancer) handed() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.conns)
}

// podBurstReport renders docs/podburst-<release>.md.
func podBurstReport(release string, conns []int, phases []*burstPhase) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# A burst of pods through the API server, with and without the webhook (Kubernetes %s)\n\n", release)
	fmt.Fprintf(&b, "Written by `make podstart` (`go test -tags podstart ./test/apiserver -run TestPodBurstThroughAPIServer -update-podburst`), not by hand.\n"+
		"%s, %d CPUs, %s/%s, load average %s at the end. A real etcd and kube-apiserver %s (envtest's), no scheduler and no kubelet:\n"+
		"the pods are stored, never run, which is what the API server and the webhook see when a Job or JobSet of that many pods is\n"+
		"created. Each pod: a trainer with a `Restart` rule and an exporter (test/apiserver `nativeRulesPod`). %d clients create them\n"+
		"at once, without a client-side rate limit (the Job controller's own client is limited to 20 requests a second by\n"+
		"default, `--kube-api-qps`, so a real Job's burst is slower than these). The webhook: two replicas of the built\n"+
		"`restart-injector serve`, each with the chart's 256 MiB memory limit in `RESTART_INJECTOR_MEMORY_LIMIT`, behind a TCP\n"+
		"balancer on loopback that, as a Service does, spreads connections, not requests.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, loadAverageNow(), release, phases[0].creators)
	b.WriteString("| Pods | Webhook | Created | Pods/s | Create p50 | Create p99 | Webhook admission p50 (API server) | p99 | kube-apiserver CPU-s per 1,000 pods | etcd CPU-s per 1,000 | kube-apiserver peak RSS | Webhook CPU-s per 1,000 pods | Webhook peak RSS per replica | Reviews per replica |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, ph := range phases {
		hook, hookCPU, hookPeak, reviews := "none", "–", "–", "–"
		if ph.webhook != "" {
			hook = ph.webhook
			total := 0.0
			var peaks, rs []string
			for i := range ph.hookCPU {
				total += ph.hookCPU[i]
				peaks = append(peaks, fmt.Sprintf("%.0f MiB", ph.hookPeakMiB[i]))
				rs = append(rs, fmt.Sprintf("%.0f", ph.hookReviews[i]))
			}
			hookCPU = fmt.Sprintf("%.2f", total/float64(ph.pods)*1000)
			hookPeak, reviews = strings.Join(peaks, ", "), strings.Join(rs, ", ")
		}
		fmt.Fprintf(&b, "| %d | %s | %d (%d denied) | %.0f | %v | %v | %s | %s | %.2f | %.2f | %.0f MiB | %s | %s | %s |\n",
			ph.pods, hook, ph.created, ph.denied, float64(ph.pods)/ph.seconds, quantile(ph.latency, 0.5), quantile(ph.latency, 0.99),
			histQuantile(ph.admission, 0.5), histQuantile(ph.admission, 0.99), ph.apiCPU/float64(ph.pods)*1000, ph.etcdCPU/float64(ph.pods)*1000,
			ph.apiPeakMiB, hookCPU, hookPeak, reviews)
	}
	fmt.Fprintf(&b, "\nConnections the balancer handed each replica over the whole run: %v.\n\n", conns)
	b.WriteString("What the webhook adds, row with against row without, at each size:\n\n")
	for i := 0; i+1 < len(phases); i += 2 {
		without, with := phases[i], phases[i+1]
		per := func(cpu float64, pods int) float64 { return cpu / float64(pods) * 1000 }
		hook := 0.0
		peak := 0.0
		for k := range with.hookCPU {
			hook += with.hookCPU[k]
			peak = max(peak, with.hookPeakMiB[k])
		}
		extraAPI := per(with.apiCPU, with.pods) - per(without.apiCPU, without.pods)
		fmt.Fprintf(&b, "- %d pods: %.0f → %.0f pods/s (×%.2f); Create p50 %v → %v; kube-apiserver +%.2f CPU-s per 1,000 pods, %.1f× the "+
			"webhook's own %.2f; the largest replica's peak RSS %.0f MiB.\n",
			with.pods, float64(without.pods)/without.seconds, float64(with.pods)/with.seconds,
			(float64(with.pods)/with.seconds)/(float64(without.pods)/without.seconds),
			quantile(without.latency, 0.5), quantile(with.latency, 0.5), extraAPI, extraAPI/math.Max(per(hook, with.pods), 1e-9), per(hook, with.pods), peak)
	}
	b.WriteString("\nThe CPU figures grow with the pods, per pod the same at both sizes; the replicas' memory does not (the reviews in\n" +
		"flight are bounded, and a review holds one pod). The API server's peak RSS grows through the run because every pod\n" +
		"of every row stays stored (its watch cache holds them all). Every process here shares the machine's cores with\n" +
		"the others and with the test's clients, so the latencies include waiting for a core.\n")
	if len(phases) > 1 {
		with := phases[1]
		hook := 0.0
		for _, c := range with.hookCPU {
			hook += c
		}
		fmt.Fprintf(&b, "At %d pods the webhook's own CPU is %.2f ms a pod; the API server's admission p50 of it is %s.\n",
			with.pods, hook/float64(with.pods)*1000, histQuantile(with.admission, 0.5))
	}
	return b.String()
}

func loadAverageNow() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
