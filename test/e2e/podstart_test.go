//go:build podstart

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestPodStart measures what injection costs a pod's start on the real
// kubelet (make podstart): N pods (PODSTART_PODS, default 100) of the small
// busybox image, in waves of 10 (each wave Ready before the next is
// created) and all at once, for each way a pod reaches the node:
//
//   - uninjected: no rules, no webhook registered (the baseline);
//   - offline (copy): injected by `restart-injector inject` (the
//     injector's MutatePod) before it is created, no webhook registered,
//     the binaries copied by the install container;
//   - offline (image volume): the same with --delivery image, where the
//     node can mount image volumes (PODSTART_CONTAINERD_DIR, a containerd
//     2 from hack/containerd.sh, and a 1.35+ kubelet);
//   - webhook: its rules in the restart-supervisor.dev/rules annotation,
//     injected by the webhook on create, by the image volume where the
//     node can mount it, else by the copy;
//   - uninjected+webhook: no rules, with the webhook registered: what the
//     admission call alone costs a pod it does not change.
//
// Each pod's phases are the moments the test's watch first sees them,
// measured from the start of the pod's create call: created (the call
// returned: admission included), initialized (condition Initialized),
// started (its container running) and ready (condition Ready). The
// statuses' own timestamps have one-second resolution, too coarse for
// these figures. The API server's admission-webhook histogram gives the
// webhook's mean per call. The run writes docs/podstart-<release>.md.
func TestPodStart(t *testing.T) {
	n := podCount("PODSTART_PODS", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	upStart := time.Now()
	b := upBenchNode(ctx, t)
	c, delivery := b.c, "copy"
	if b.imageVolumes {
		delivery = "image"
	}
	t.Logf("cluster %s up in %s", c.KubeVersion, time.Since(upStart).Round(time.Second))
	inj := injector.New(injector.Options{SupervisorImage: cluster.SupervisorImage, ImagePullPolicy: corev1.PullNever})
	load := []string{podstartLoad()}

	type variant struct {
		name string
		make func(name string) *corev1.Pod
	}
	uninjected := variant{"uninjected", func(name string) *corev1.Pod { return benchPod(name, false) }}
	offlineBy := func(d injector.Delivery) func(string) *corev1.Pod {
		return func(name string) *corev1.Pod {
			res, err := inj.MutatePodWith(ctx, benchPod(name, true), injector.Call{Delivery: d})
			if err != nil {
				t.Fatal(err)
			}
			return res.Pod
		}
	}
	offline := variant{"offline (copy)", offlineBy(injector.DeliveryCopy)}
	offlineImage := variant{"offline (image volume)", offlineBy(injector.DeliveryImage)}
	webhookName := "webhook (copy)"
	if delivery == "image" {
		webhookName = "webhook (image volume)"
	}
	viaWebhook := variant{webhookName, func(name string) *corev1.Pod {
		p := benchPod(name, true)
		if err := cluster.RulesToAnnotation(&p.ObjectMeta, &p.Spec); err != nil {
			t.Fatal(err)
		}
		return p
	}}
	passThrough := variant{"uninjected+webhook", uninjected.make}

	// Warm-up, not reported: the first sandboxes, the images' first
	// unpack into the snapshotter, the install container's first copy.
	b.run(ctx, "warmup-u", uninjected.make, 10, 10)
	b.run(ctx, "warmup-o", offline.make, 10, 10)
	if delivery == "image" {
		b.run(ctx, "warmup-i", offlineImage.make, 10, 10)
	}

	var rows []podstartRow
	measure := func(v variant) {
		for _, wave := range []int{10, n} {
			label := "waves of 10"
			if wave == n {
				label = "all at once"
			}
			before, criBefore := b.admissionSeconds(ctx), b.kubeletOps(ctx)
			samples := b.run(ctx, fmt.Sprintf("%s-%d", podPrefix(v.name), wave), v.make, n, wave)
			after := b.admissionSeconds(ctx)
			row := podstartRow{variant: v.name, mode: label, samples: samples, cri: criDelta(criBefore, b.kubeletOps(ctx))}
			if after.count > before.count {
				row.admission = (after.sum - before.sum) / float64(after.count-before.count)
				row.admissionCalls = after.count - before.count
			}
			rows = append(rows, row)
			t.Logf("%s, %s: ready p50 %.3fs p99 %.3fs", v.name, label, row.quantile(phaseReady, 0.5), row.quantile(phaseReady, 0.99))
		}
	}
	measure(uninjected)
	measure(offline)
	if delivery == "image" {
		measure(offlineImage)
	}
	if err := c.StartWebhook(ctx, b.repo); err != nil {
		t.Fatalf("webhook: %v", err)
	}
	measure(viaWebhook)
	measure(passThrough)
	load = append(load, podstartLoad())

	b.writeReport("podstart", podstartReport("Pod start with and without injection", c.KubeVersion, runtimeOf(b.containerdDir),
		"no resources: BestEffort", "mode", n, rows, load, time.Since(upStart)))
}

// TestInstallContainerLimitOnKubelet measures what the install container's
// own resources cost a pod that declares some (Burstable: requests 100m CPU
// and 64Mi, limits 1 CPU and 256Mi; TestPodStart's pods are BestEffort, whose
// install container has none): PODSTART_LIMIT_PODS pods (default 50) in
// waves of 10, uninjected, injected with the fixed 10m/16Mi requests and
// limits of earlier releases (Options.InitResources), with the pod's own
// largest container's (the default now), and, where the node mounts image
// volumes, by the image volume. Writes docs/podstart-resources-<release>.md.
func TestInstallContainerLimitOnKubelet(t *testing.T) {
	n := podCount("PODSTART_LIMIT_PODS", 50)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	upStart := time.Now()
	b := upBenchNode(ctx, t)
	load := []string{podstartLoad()}
	burstable := func(name string, rules bool) *corev1.Pod {
		p := benchPod(name, rules)
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		}
		return p
	}
	fixed := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	withOpts := func(opts injector.Options, d injector.Delivery) func(string) *corev1.Pod {
		opts.SupervisorImage, opts.ImagePullPolicy = cluster.SupervisorImage, corev1.PullNever
		inj := injector.New(opts)
		return func(name string) *corev1.Pod {
			res, err := inj.MutatePodWith(ctx, burstable(name, true), injector.Call{Delivery: d})
			if err != nil {
				t.Fatal(err)
			}
			return res.Pod
		}
	}
	variants := []benchVariant{
		{"uninjected", "", "uninjected", func(name string) *corev1.Pod { return burstable(name, false) }},
		{"fixed", "", "copy, fixed 10m / 16Mi (before)", withOpts(injector.Options{InitResources: &corev1.ResourceRequirements{Requests: fixed, Limits: fixed.DeepCopy()}}, injector.DeliveryCopy)},
		{"own", "", "copy, the pod's own container's (now)", withOpts(injector.Options{}, injector.DeliveryCopy)},
	}
	if b.imageVolumes {
		variants = append(variants, benchVariant{"image", "", "image volume", withOpts(injector.Options{}, injector.DeliveryImage)})
	}
	b.run(ctx, "warmup-u", variants[0].make, 10, 10)
	b.run(ctx, "warmup-o", variants[2].make, 10, 10)
	var rows []podstartRow
	for _, row := range b.interleave(ctx, "limit", n/10, variants) {
		row.mode = "waves of 10"
		rows = append(rows, row)
		t.Logf("%s: initialized p50 %.3fs, ready p50 %.3fs p99 %.3fs", row.variant, row.quantile(phaseInitialized, 0.5), row.quantile(phaseReady, 0.5), row.quantile(phaseReady, 0.99))
	}
	load = append(load, podstartLoad())
	b.writeReport("podstart-resources", podstartReport("The install container's resources and pod start", b.c.KubeVersion, runtimeOf(b.containerdDir),
		"requests 100m CPU and 64Mi, limits 1 CPU and 256Mi: Burstable", "mode", len(rows[0].samples), rows, load, time.Since(upStart)))
}

// TestPodStartVolumes finds where the image volume's remaining cost comes
// from, and measures every delivery against the pod a user actually runs.
// The kubelet waits for a pod's volumes before it creates its sandbox
// (Kubelet.SyncPod calls volumeManager.WaitForAttachAndMount), and that
// wait returns at once for a pod with no volume at all but otherwise polls
// every 300 ms (podAttachAndMountRetryInterval, its first look coming
// before the volume manager's 100 ms loops have mounted anything:
// pkg/kubelet/volumemanager/volume_manager.go, v1.37.2). TestPodStart's
// pods have no volume (automountServiceAccountToken: false), so the image
// volume, their first, pays that poll; a pod of a default cluster already
// has one, the service account's token (kube-api-access-*, added by the
// ServiceAccount admission plugin unless the pod or its account opts out),
// and pays it whatever is injected.
//
// Interleaved waves of 10, a wave of each variant in turn, PODSTART_PODS
// pods each (default 100):
//
//   - no volume: uninjected; uninjected with an emptyDir of its own (the
//     control: any volume, nothing of ours); the image volume where the
//     node mounts them; the copy;
//   - the service account's token (the default): uninjected; the image
//     volume; the copy.
//
// Each shape's +ready is against its own uninjected row. Writes
// docs/podstart-volumes-<release>.md.
func TestPodStartVolumes(t *testing.T) {
	n := podCount("PODSTART_PODS", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	upStart := time.Now()
	b := upBenchNode(ctx, t)
	c, client := b.c, b.client
	// The token volume projects the ConfigMap kube-root-ca.crt, which a
	// cluster's root-ca-cert-publisher controller writes into every
	// namespace; without it the kubelet cannot mount the volume. This
	// cluster runs no such controller: the test writes it as the
	// controller would (the API server's self-signed certificate, which
	// holds its CA, under ca.crt). The token itself the kubelet requests
	// from the API server (TokenRequest), as on any node.
	ca, err := os.ReadFile(filepath.Join(c.Dir, "pki", "apiserver", "apiserver.crt"))
	if err != nil {
		t.Fatalf("the API server's CA: %v", err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data: map[string]string{"ca.crt": string(ca)}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	load := []string{podstartLoad()}
	const noVolume, token = "no volume", "service-account token"
	shaped := func(name string, rules bool, shape string) *corev1.Pod {
		p := benchPod(name, rules)
		if shape == token {
			p.Spec.AutomountServiceAccountToken = nil
		}
		return p
	}
	inj := injector.New(injector.Options{SupervisorImage: cluster.SupervisorImage, ImagePullPolicy: corev1.PullNever})
	injected := func(shape string, d injector.Delivery) func(string) *corev1.Pod {
		return func(name string) *corev1.Pod {
			res, err := inj.MutatePodWith(ctx, shaped(name, true, shape), injector.Call{Delivery: d})
			if err != nil {
				t.Fatal(err)
			}
			return res.Pod
		}
	}
	variants := []benchVariant{
		{"none-u", noVolume, "uninjected", func(name string) *corev1.Pod { return shaped(name, false, noVolume) }},
		{"none-e", noVolume, "uninjected, an emptyDir of its own", func(name string) *corev1.Pod {
			p := shaped(name, false, noVolume)
			p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
			return p
		}},
	}
	if b.imageVolumes {
		variants = append(variants, benchVariant{"none-i", noVolume, "image volume", injected(noVolume, injector.DeliveryImage)})
	}
	variants = append(variants,
		benchVariant{"none-c", noVolume, "copy", injected(noVolume, injector.DeliveryCopy)},
		benchVariant{"token-u", token, "uninjected", func(name string) *corev1.Pod { return shaped(name, false, token) }})
	if b.imageVolumes {
		variants = append(variants, benchVariant{"token-i", token, "image volume", injected(token, injector.DeliveryImage)})
	}
	variants = append(variants, benchVariant{"token-c", token, "copy", injected(token, injector.DeliveryCopy)})

	// Warm-up, not reported: the first token requests, sandboxes and
	// unpacks, and one pod of each variant's shape.
	for _, v := range variants {
		b.run(ctx, "warmup-"+v.id, v.make, 10, 10)
	}
	var rows []podstartRow
	for _, row := range b.interleave(ctx, "vol", n/10, variants) {
		rows = append(rows, row)
		t.Logf("%s, %s: ready p50 %.3fs p99 %.3fs", row.mode, row.variant, row.quantile(phaseReady, 0.5), row.quantile(phaseReady, 0.99))
	}
	load = append(load, podstartLoad())
	b.writeReport("podstart-volumes", podstartReport("Pod start by the pod's volumes", c.KubeVersion, runtimeOf(b.containerdDir),
		"no resources: BestEffort; in waves of 10, a wave of each row in turn", "pod's volumes", len(rows[0].samples), rows, load, time.Since(upStart)))
}

// benchPod is the measured pod: one container of the local busybox image
// that sleeps, restartPolicy Never; with rules, Restart on exit 42 (so that
// the injector wraps it).
func benchPod(name string, withRules bool) *corev1.Pod {
	c := corev1.Container{Name: "c", Image: cluster.BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}
	if withRules {
		c.RestartPolicy = policy(corev1.ContainerRestartPolicyNever)
		c.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	}
	zero, no := int64(0), false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"podstart": "bench"}},
		// No service account token: the cluster runs no controller that
		// publishes kube-root-ca.crt, as the conformance pods.
		Spec: corev1.PodSpec{NodeName: cluster.NodeName, RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no,
			TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{c}},
	}
}

// The phases of a pod's start, in order.
const (
	phaseCreated = iota
	phaseInitialized
	phaseStarted
	phaseReady
	phases
)

var phaseNames = [phases]string{"created", "initialized", "started", "ready"}

// podSample is one pod: each phase's time from the start of its create
// call (0 while not seen).
type podSample [phases]time.Duration

type podBench struct {
	t      *testing.T
	c      *cluster.Cluster
	client kubernetes.Interface
	ns     string
	repo   string
	// containerdDir is PODSTART_CONTAINERD_DIR, the containerd the node
	// runs ("": Debian's); imageVolumes, whether the node mounts image
	// volumes (containerd 2 under a 1.35+ kubelet).
	containerdDir string
	imageVolumes  bool
}

// podCount is the count the environment variable name gives, def when it
// is unset or not a positive number.
func podCount(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// upBenchNode starts the single-node cluster the pod-start benchmarks run
// on: the restart gates off, so that the webhook wraps what it sees as on
// a cluster without the feature; the supervisor's image loaded; the
// image-volume delivery for the webhook where the node mounts them.
func upBenchNode(ctx context.Context, t *testing.T) *podBench {
	t.Helper()
	repo, binDir := prepareNode(t)
	kubelet, err := cluster.KubeVersion(binDir)
	if err != nil {
		t.Fatal(err)
	}
	b := &podBench{t: t, ns: "default", repo: repo, containerdDir: os.Getenv("PODSTART_CONTAINERD_DIR")}
	b.imageVolumes = b.containerdDir != "" && cluster.Minor(kubelet) >= 35
	delivery := "copy"
	if b.imageVolumes {
		delivery = "image"
	}
	b.c, err = cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, RestartRules: false, SupervisorImage: true,
		ContainerdDir: b.containerdDir, Delivery: delivery, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, b.c)
	cfg := *b.c.Config
	cfg.QPS, cfg.Burst = 1000, 1000
	if b.client, err = kubernetes.NewForConfig(&cfg); err != nil {
		t.Fatal(err)
	}
	return b
}

// benchVariant is one row of an interleaved run: id names its pods, shape
// (the report's second column, "" for none) and name label the row, make
// builds a pod of the given name.
type benchVariant struct {
	id, shape, name string
	make            func(string) *corev1.Pod
}

// interleave runs rounds waves of 10 pods of each variant, a wave of each
// in turn, so that a drift of the machine's load over the run reaches
// every row alike; one row a variant, in order, with its samples and the
// kubelet's runtime calls made during its waves.
func (b *podBench) interleave(ctx context.Context, prefix string, rounds int, variants []benchVariant) []podstartRow {
	per := map[string][]podSample{}
	cri := map[string]map[string]histogramSum{}
	for round := 0; round < rounds; round++ {
		for _, v := range variants {
			before := b.kubeletOps(ctx)
			per[v.id] = append(per[v.id], b.run(ctx, fmt.Sprintf("%s-%s-%d", prefix, v.id, round), v.make, 10, 10)...)
			if cri[v.id] == nil {
				cri[v.id] = map[string]histogramSum{}
			}
			for op, h := range criDelta(before, b.kubeletOps(ctx)) {
				cri[v.id][op] = histogramSum{sum: cri[v.id][op].sum + h.sum, count: cri[v.id][op].count + h.count}
			}
		}
	}
	rows := make([]podstartRow, 0, len(variants))
	for _, v := range variants {
		rows = append(rows, podstartRow{variant: v.name, mode: v.shape, samples: per[v.id], cri: cri[v.id]})
	}
	return rows
}

// writeReport logs doc and writes it as docs/<name>-<release>.md.
func (b *podBench) writeReport(name, doc string) {
	b.t.Helper()
	b.t.Log("\n" + doc)
	path := filepath.Join(b.repo, "docs", name+"-"+b.c.KubeVersion+".md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s", path)
}

// run creates n pods named prefix-i, wave at a time (each wave Ready
// before the next is created), and returns their samples once all are
// Ready; then it deletes them and waits until they are gone.
func (b *podBench) run(ctx context.Context, prefix string, mk func(string) *corev1.Pod, n, wave int) []podSample {
	b.t.Helper()
	var mu sync.Mutex
	start := map[string]time.Time{}
	samples := map[string]*podSample{}
	readyC := make(chan string, n)
	w, err := b.client.CoreV1().Pods(b.ns).Watch(ctx, metav1.ListOptions{LabelSelector: "podstart=bench"})
	if err != nil {
		b.t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			now := time.Now()
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || !strings.HasPrefix(p.Name, prefix+"-") {
				continue
			}
			mu.Lock()
			s, t0 := samples[p.Name], start[p.Name]
			if s == nil {
				mu.Unlock()
				continue
			}
			seen := func(i int, ok bool) {
				if ok && s[i] == 0 {
					s[i] = now.Sub(t0)
					if i == phaseReady {
						readyC <- p.Name
					}
				}
			}
			seen(phaseInitialized, condition(p, corev1.PodInitialized))
			seen(phaseStarted, len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil)
			seen(phaseReady, condition(p, corev1.PodReady))
			mu.Unlock()
		}
	}()
	idle := b.runtimeContainers()
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = mk(fmt.Sprintf("%s-%03d", prefix, i))
	}
	for from := 0; from < n; from += wave {
		to := min(from+wave, n)
		var wg sync.WaitGroup
		errs := make(chan error, to-from)
		// At most 20 create calls at once, as a controller's workers.
		sem := make(chan struct{}, 20)
		for _, p := range pods[from:to] {
			wg.Add(1)
			go func(p *corev1.Pod) {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				mu.Lock()
				samples[p.Name] = &podSample{}
				t0 := time.Now()
				start[p.Name] = t0
				mu.Unlock()
				_, err := b.client.CoreV1().Pods(b.ns).Create(ctx, p, metav1.CreateOptions{})
				mu.Lock()
				samples[p.Name][phaseCreated] = time.Since(t0)
				mu.Unlock()
				if err != nil {
					errs <- fmt.Errorf("create %s: %w", p.Name, err)
				}
			}(p)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.t.Fatal(err)
		}
		deadline := time.After(15 * time.Minute)
		for i := from; i < to; i++ {
			select {
			case <-readyC:
			case <-deadline:
				b.t.Fatalf("%s: pods %d..%d not all Ready within 15 minutes", prefix, from, to-1)
			}
		}
	}
	mu.Lock()
	out := make([]podSample, 0, n)
	for _, s := range samples {
		out = append(out, *s)
	}
	mu.Unlock()
	b.deleteAll(ctx, idle)
	return out
}

func condition(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deleteAll deletes the measured pods at once and waits until the API
// server has none left and containerd runs no more tasks (containers and
// sandboxes) than idle, so that the next run starts on an idle node: the
// kubelet tears sandboxes down after the pod objects are gone, and a burst
// of 100 teardowns beside the next row's first wave made its p99 several
// times its median.
func (b *podBench) deleteAll(ctx context.Context, idle int) {
	zero := int64(0)
	if err := b.client.CoreV1().Pods(b.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: "podstart=bench"}); err != nil {
		b.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		l, err := b.client.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: "podstart=bench"})
		if err != nil {
			b.t.Fatal(err)
		}
		if len(l.Items) == 0 && b.runtimeContainers() <= idle {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%d pods, %d running tasks (idle: %d) left 10 minutes after their deletion", len(l.Items), b.runtimeContainers(), idle)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// runtimeContainers counts the running tasks (sandboxes included) in
// containerd's k8s.io namespace: the stopped ones cost nothing, and the
// kubelet's container GC removes them only later.
func (b *podBench) runtimeContainers() int {
	out, err := exec.Command(b.c.ContainerdTool("ctr"), "--address", b.c.Containerd, "-n", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		b.t.Fatalf("ctr tasks ls: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "RUNNING" {
			n++
		}
	}
	return n
}

type histogramSum struct {
	sum   float64
	count int
}

// admissionSeconds reads the API server's
// apiserver_admission_webhook_admission_duration_seconds, summed over its
// series (there is one webhook).
func (b *podBench) admissionSeconds(ctx context.Context) histogramSum {
	raw, err := b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.t.Fatalf("API server metrics: %v", err)
	}
	var h histogramSum
	for _, line := range bytes.Split(raw, []byte("\n")) {
		name, rest, ok := bytes.Cut(line, []byte("{"))
		if !ok {
			continue
		}
		_, value, ok := bytes.Cut(rest, []byte("} "))
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(string(bytes.TrimSpace(value)), 64)
		if err != nil {
			continue
		}
		switch string(name) {
		case "apiserver_admission_webhook_admission_duration_seconds_sum":
			h.sum += v
		case "apiserver_admission_webhook_admission_duration_seconds_count":
			h.count += int(v)
		}
	}
	return h
}

type podstartRow struct {
	variant, mode  string
	samples        []podSample
	admission      float64 // mean seconds per webhook call, 0 when none
	admissionCalls int
	// cri is the kubelet's time in CRI calls over the row, by operation
	// (kubeletOps after minus before), nil when not read.
	cri map[string]histogramSum
}

// criOps are the kubelet's CRI operations a row reports, per pod: the
// container's creation (where the runtime mounts an image volume), its
// start, and the image status checks (the install container's image, and
// an image volume's before it is mounted).
var criOps = []string{"create_container", "start_container", "image_status"}

// kubeletOps reads kubelet_runtime_operations_duration_seconds, the CRI
// calls the kubelet made by operation, from its /metrics (the harness's
// kubelet serves it without authentication, on the node's address).
func (b *podBench) kubeletOps(ctx context.Context) map[string]histogramSum {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(b.c.NodeIP, "10250")+"/metrics", nil)
	if err != nil {
		b.t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		b.t.Fatalf("kubelet metrics: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		b.t.Fatalf("kubelet metrics: %v", err)
	}
	ops := map[string]histogramSum{}
	if f := families["kubelet_runtime_operations_duration_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation_type" {
					ops[l.GetValue()] = histogramSum{sum: m.GetHistogram().GetSampleSum(), count: int(m.GetHistogram().GetSampleCount())}
				}
			}
		}
	}
	return ops
}

// criDelta is after minus before, by operation.
func criDelta(before, after map[string]histogramSum) map[string]histogramSum {
	d := map[string]histogramSum{}
	for op, a := range after {
		d[op] = histogramSum{sum: a.sum - before[op].sum, count: a.count - before[op].count}
	}
	return d
}

// quantile is the q-quantile (nearest rank) of a phase over the row's
// pods, in seconds.
func (r podstartRow) quantile(phase int, q float64) float64 {
	var v []float64
	for _, s := range r.samples {
		v = append(v, s[phase].Seconds())
	}
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[max(i, 0)]
}

func podstartLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// podPrefix makes a variant's name a pod-name prefix: "offline (image
// volume)" → "offline-image-volume".
func podPrefix(variant string) string {
	return strings.Join(strings.FieldsFunc(variant, func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == '+' }), "-")
}

func podstartReport(title, release, runtimeName, shape, modeColumn string, n int, rows []podstartRow, load []string, took time.Duration) string {
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, kubelet %s\n\n", title, release)
	fmt.Fprintf(&b, "Written by `make podstart` (test/e2e/podstart_test.go) on kubelet %s, commit %s, %s UTC; load average %s at the start, %s at the end; the run took %s.\n",
		release, strings.TrimSpace(string(commit)), time.Now().UTC().Format("2006-01-02 15:04"), load[0], load[len(load)-1], took.Round(time.Second))
	fmt.Fprintf(&b, "%d pods per row, one container of a local busybox image (`sleep 3600`, %s), on one node (API server, kubelet and %s on this machine, %d CPUs). ", n, shape, runtimeName, runtime.NumCPU())
	b.WriteString("Each phase is when the test's watch first saw it, from the start of the pod's create call: median and p99 (nearest rank) in seconds. ")
	b.WriteString("`created` is the create call itself (admission included); `initialized` the Initialized condition (a pod injected with the copy first runs the install container; the image volume has none); `started` its container running; `ready` the Ready condition. ")
	fmt.Fprintf(&b, "`+ready` is the median `ready` over the uninjected row of the same %s. ", modeColumn)
	b.WriteString("The webhook is registered as `deploy/base/webhook.yaml` registers it: its matchConditions, which the API server evaluates, send it only pods that carry rules, so `uninjected+webhook` makes no webhook call at all.\n\n")
	b.WriteString("`kubelet CRI per pod` is the kubelet's time in the runtime's " + strings.Join(criOps, ", ") + " calls over the row (`kubelet_runtime_operations_duration_seconds`), divided by its pods, in ms: where the install container's second container and an image volume's mount show.\n\n")
	b.WriteString("| pods | " + modeColumn + " | created p50 / p99 | initialized p50 / p99 | started p50 / p99 | ready p50 / p99 | +ready | webhook mean per call | kubelet CRI per pod, ms: " + strings.Join(criOps, " / ") + " |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	base := map[string]float64{}
	for _, r := range rows {
		if r.variant == "uninjected" {
			base[r.mode] = r.quantile(phaseReady, 0.5)
		}
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |", r.variant, r.mode)
		for p := phaseCreated; p < phases; p++ {
			fmt.Fprintf(&b, " %.3f / %.3f |", r.quantile(p, 0.5), r.quantile(p, 0.99))
		}
		over := "—"
		if r0, ok := base[r.mode]; ok && r.variant != "uninjected" && r0 > 0 {
			over = fmt.Sprintf("%+.3fs (%+.0f%%)", r.quantile(phaseReady, 0.5)-r0, 100*(r.quantile(phaseReady, 0.5)/r0-1))
		}
		adm := "none"
		if r.admissionCalls > 0 {
			adm = fmt.Sprintf("%.1f ms (%d calls)", 1000*r.admission, r.admissionCalls)
		}
		cri := "not read"
		if r.cri != nil && len(r.samples) > 0 {
			var parts []string
			for _, op := range criOps {
				parts = append(parts, fmt.Sprintf("%.1f (%d calls)", 1000*r.cri[op].sum/float64(len(r.samples)), r.cri[op].count))
			}
			cri = strings.Join(parts, " / ")
		}
		fmt.Fprintf(&b, " %s | %s | %s |\n", over, adm, cri)
	}
	b.WriteString("\nPhases: " + strings.Join(phaseNames[:], ", ") + ".\n")
	return b.String()
}
