// Package e2e runs the upstream KEP-5307 container-restart scenarios on a
// real single-node cluster (see test/e2e/cluster) twice: natively, with the
// ContainerRestartRules feature gate on, and supervised, with the gate off
// and the pods mutated by the project's injector so that restart-supervisor
// does the work. It compares the outcomes and writes docs/conformance-<version>.md
// and the matrix of every release's file, docs/conformance.md.
//
//	go test ./test/e2e/ -run TestConformance -v -timeout 20m
//
// Supervised pods go through the restart-injector webhook running on the
// host and registered from deploy/base/webhook.yaml; E2E_SUPERVISE=injector
// applies the injector package before create instead. A third mode, auto
// (E2E_MODES=native,supervised,auto; not run by default), is what a user
// of the release gets: its default gates, every pod through the same
// webhook in --native=auto, each pod's outcome and auto's choice for it
// checked (auto_test.go). Needs root. E2E_MODES=native or E2E_MODES=supervised runs one mode only
// (the release's file is written only when both ran, the auto file when auto ran); E2E_SCENARIOS=A,B runs only
// those scenarios; E2E_KEEP=1 leaves a failed run's cluster up. Outside CI a non-root run
// skips; with CI=true any failure to bring the cluster up fails the test.
package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

type mode string

const (
	native     mode = "native"
	supervised mode = "supervised"
	// auto: the release's default gates and every pod through the webhook
	// in --native=auto, as a user installs it (auto_test.go).
	auto mode = "auto"
)

// env is one mode's cluster and the way pods reach it.
type env struct {
	mode mode
	repo string // the repository root
	c    *cluster.Cluster
	ns   string
	// mutatePod/mutateJob are set in supervised mode when the pods are
	// mutated before they are created (nil: created as written, and a
	// registered webhook, if any, mutates them).
	mutatePod func(context.Context, *corev1.Pod) (*corev1.Pod, error)
	mutateJob func(context.Context, *batchv1.Job) (*batchv1.Job, error)
	// mutateObject, set with mutateJob, mutates any workload object.
	mutateObject func(context.Context, *unstructured.Unstructured) (*unstructured.Unstructured, error)
	how          string // how supervised pods were mutated, for the report
	// admitted records how the webhook admitted each pod (auto mode).
	admitted *admissions
	// delivered records the pods of a supervised run, to check that each
	// wrapped pod got the binaries by the run's delivery (E2E_DELIVERY).
	delivered *admissions
	// delivery is how wrapped pods get the binaries in this run: copy or
	// image, E2E_DELIVERY's, or what the webhook's --delivery=auto chose.
	delivery string
}

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// unavailable skips outside CI and fails in CI.
func unavailable(t *testing.T, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg + " (skipped outside CI)")
}

// prepareNode checks for root, installs what the cluster needs (or takes
// KUBE_BIN_DIR) and takes the host's node lock for the rest of the test:
// the kubelet's ports and the kubepods cgroups are global, so concurrent
// runs (go test ./... from two shells) take turns.
func prepareNode(t *testing.T) (repo, binDir string) {
	if os.Geteuid() != 0 {
		unavailable(t, "the end-to-end cluster needs root (containerd, kubelet, mounts, cgroups)")
	}
	repo = repoRoot(t)
	binDir = os.Getenv("KUBE_BIN_DIR")
	if binDir == "" {
		out, err := exec.Command(filepath.Join(repo, "test", "e2e", "setup.sh")).Output()
		if err != nil {
			unavailable(t, "test/e2e/setup.sh (packages, Kubernetes binaries) failed: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		binDir = lines[len(lines)-1]
	}
	unlock, err := cluster.Lock(cluster.DefaultDir, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	// A cluster brought up by hand (hack/e2e-up.sh) holds no lock once
	// its command has ended; this test's cluster would replace it.
	if pid, running := cluster.ManualCluster(cluster.DefaultDir); running {
		t.Fatalf("a cluster brought up by hand runs in %s (kube-apiserver pid %d): hack/e2e-down.sh first", cluster.DefaultDir, pid)
	}
	return repo, binDir
}

// tearDownAtEnd takes the cluster down when t ends (left up for a failed
// test with E2E_KEEP=1) and reports what it left behind.
func tearDownAtEnd(t *testing.T, c *cluster.Cluster) {
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("E2E_KEEP") == "1" {
			t.Logf("E2E_KEEP=1: cluster left running; KUBECONFIG=%s; hack/e2e-down.sh removes it", c.Kubeconfig)
			return
		}
		saved := cluster.SavedSysctls(c.Dir)
		if err := cluster.Down(c.Dir, testWriter{t}); err != nil {
			t.Errorf("cluster down: %v", err)
		}
		if left := cluster.Leftovers(c.State, saved); len(left) > 0 {
			t.Errorf("cluster down left behind: %s", strings.Join(left, "; "))
		}
	})
}

func TestConformance(t *testing.T) {
	repo, binDir := prepareNode(t)
	modes := []mode{native, supervised}
	if m := os.Getenv("E2E_MODES"); m != "" {
		modes = nil
		for _, s := range strings.Split(m, ",") {
			modes = append(modes, mode(strings.TrimSpace(s)))
		}
	}
	if os.Getenv("E2E_KUBELET_BIN_DIR") != "" && (len(modes) != 1 || modes[0] != auto) {
		t.Fatal("E2E_KUBELET_BIN_DIR (a kubelet of another release) runs with E2E_MODES=auto only")
	}
	kubeletGates, err := cluster.ParseGates(os.Getenv("E2E_KUBELET_GATES"))
	if err != nil {
		t.Fatalf("E2E_KUBELET_GATES: %v", err)
	}
	if len(kubeletGates) > 0 && (len(modes) != 1 || modes[0] != auto) {
		t.Fatal("E2E_KUBELET_GATES (gates of the kubelet only) runs with E2E_MODES=auto only")
	}
	rep := &report{results: map[string]map[mode]result{}, started: time.Now(), kubeletGates: kubeletGates,
		containerdDir: os.Getenv("E2E_CONTAINERD_DIR"), delivery: cmp.Or(os.Getenv("E2E_DELIVERY"), "copy")}
	if _, err := injector.ParseDelivery(rep.delivery); err != nil && rep.delivery != "auto" {
		t.Fatalf("E2E_DELIVERY: %v, or auto", err)
	}

	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) { runMode(t, m, repo, binDir, rep) })
	}
	// A run of some scenarios only (E2E_SCENARIOS) would replace the table
	// with its few rows: only a full run writes it, unless asked to.
	full := strings.TrimSpace(os.Getenv("E2E_SCENARIOS")) == ""
	write := full && !t.Failed() || os.Getenv("E2E_WRITE_REPORT") == "1"
	ran := map[mode]bool{}
	for _, m := range modes {
		ran[m] = true
	}
	if write && ran[auto] {
		path := autoFile(filepath.Join(repo, "docs"), rep.version)
		if rep.apiVersion != rep.version || len(kubeletGates) > 0 {
			path = skewFile(filepath.Join(repo, "docs"), rep.apiVersion, rep.version, kubeletGates)
		}
		if err := rep.writeAuto(path, scenarios()); err != nil {
			t.Fatal(err)
		}
		if err := writeMatrix(filepath.Join(repo, "docs")); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and docs/conformance.md", path)
	}
	if write && ran[native] && ran[supervised] && rep.deliveredAs() == "image" {
		// The image-volume delivery's table, beside the release's own.
		path := filepath.Join(repo, "docs", "conformance-image-"+rep.version+".md")
		if err := rep.write(path, scenarios()); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	} else if write && ran[native] && ran[supervised] {
		// Each release writes its own file, and the matrix of all of them
		// (docs/conformance.md) is made again.
		path := filepath.Join(repo, "docs", "conformance-"+rep.version+".md")
		if err := rep.write(path, scenarios()); err != nil {
			t.Fatal(err)
		}
		if err := writeMatrix(filepath.Join(repo, "docs")); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and docs/conformance.md", path)
	}
	t.Log("\n" + rep.table(scenarios()))
}

func runMode(t *testing.T, m mode, repo, binDir string, rep *report) {
	if m == native {
		version, err := cluster.KubeVersion(binDir)
		if err != nil {
			t.Fatal(err)
		}
		if !cluster.RestartRulesNative(version) {
			// Nothing to compare with: every row's native cell is n/a.
			rep.setVersion(version)
			for _, s := range selected() {
				rep.set(s.name, m, result{outcome: "n/a", notes: []string{"restart rules are not in Kubernetes " + version}})
			}
			t.Logf("Kubernetes %s has no restart rules (ContainerRestartRules is new in 1.34): no native run", version)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	var jobSet string
	for _, s := range selected() {
		if s.needsJobSet && jobSet == "" {
			jobSet = jobSetDir(t, repo)
		}
	}
	c, err := cluster.Up(ctx, cluster.Options{
		BinDir:            binDir,
		KubeletBinDir:     os.Getenv("E2E_KUBELET_BIN_DIR"),
		KubeletGates:      rep.kubeletGates,
		Repo:              repo,
		RestartRules:      m == native,
		DefaultGates:      m == auto,
		ControllerManager: true,
		SupervisorImage:   m != native,
		JobSetDir:         jobSet,
		ContainerdDir:     rep.containerdDir,
		Delivery:          rep.delivery,
		Log:               testWriter{t},
	})
	if err != nil {
		t.Fatalf("cluster up (%s): %v", m, err)
	}
	tearDownAtEnd(t, c)
	rep.setUp(m, time.Since(start))
	rep.setVersion(c.KubeVersion)
	rep.setAPIVersion(c.APIServerVersion)
	e := &env{mode: m, repo: repo, c: c, ns: "default", delivery: c.Delivery}
	if m == supervised {
		if os.Getenv("E2E_SUPERVISE") == "injector" {
			if c.Delivery == "auto" {
				t.Fatal("E2E_DELIVERY=auto is the webhook's choice: it runs without E2E_SUPERVISE=injector")
			}
			e.superviseWithInjector()
		} else {
			if err := c.StartWebhook(ctx, repo); err != nil {
				t.Fatalf("webhook: %v\n%s", err, tailFile(c.LogPath("restart-injector")))
			}
			e.how = "the restart-injector webhook on the host, registered from deploy/base/webhook.yaml"
		}
		if c.Delivery == "auto" {
			chose, reason, err := waitDeliveryChoice(ctx, c.LogPath("restart-injector"), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			// What auto must choose here: the image volume on a 1.35+
			// kubelet over containerd 2 (E2E_CONTAINERD_DIR), the copy on
			// Debian's containerd 1.6 or an older kubelet.
			want := "copy"
			if rep.containerdDir != "" && cluster.Minor(c.KubeVersion) >= 35 {
				want = "image"
			}
			if chose != want {
				t.Fatalf("--delivery=auto chose %s on kubelet %s over %s, want %s: %s", chose, c.KubeVersion, runtimeOf(rep.containerdDir), want, reason)
			}
			t.Logf("--delivery=auto chose %s: %s", chose, reason)
			e.delivery = chose
			rep.setDeliveredAs(chose)
			e.how += fmt.Sprintf(" in --delivery=auto, which chose the %s (%s)", map[string]string{"image": "image volume", "copy": "install container's copy"}[chose], reason)
		}
		if c.Delivery == "image" {
			e.how += ", delivering the binaries as an image volume of the supervisor image (--delivery=image: no install container)"
		}
		var err error
		if e.delivered, err = watchAdmissions(ctx, c, e.ns); err != nil {
			t.Fatalf("watch pods: %v", err)
		}
	}
	if m == auto {
		if err := c.StartWebhook(ctx, repo); err != nil {
			t.Fatalf("webhook: %v\n%s", err, tailFile(c.LogPath("restart-injector")))
		}
		e.how = "the restart-injector webhook on the host, registered from deploy/base/webhook.yaml, in --native=auto at the release's default gates"
		concluded, err := waitConclusion(ctx, c.LogPath("restart-injector"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rep.setAutoDefaults(concluded)
		if e.admitted, err = watchAdmissions(ctx, c, e.ns); err != nil {
			t.Fatalf("watch pods: %v", err)
		}
	}
	// runOne runs a scenario and, in auto mode, records how its pods were
	// admitted.
	runOne := func(s scenario) result {
		key := strings.ToLower(s.name) + "-" + string(m)
		r := s.run(ctx, e, key)
		if e.admitted != nil {
			r.admitted = e.admitted.of(key)
			r.choice = choiceOf(r.admitted)
		}
		if e.delivered != nil && r.err == nil {
			for _, a := range e.delivered.of(key) {
				if a.wrapped && a.delivery != e.delivery {
					r.err = fmt.Errorf("pod %s got the binaries by %s, want %s (E2E_DELIVERY=%s)", a.name, a.delivery, e.delivery, c.Delivery)
				}
			}
		}
		return r
	}
	// All scenarios run at once, on goroutines rather than t.Parallel,
	// whose default limit is GOMAXPROCS: they mostly wait for back-offs.
	type pending struct {
		s    scenario
		done chan result
	}
	var runs, disruptive []pending
	scenariosStart := time.Now()
	defer func() { rep.setRun(m, time.Since(scenariosStart)) }()
	var concurrent sync.WaitGroup
	for _, s := range selected() {
		if s.needsRestartAll && m == native && !cluster.RestartAllContainersNative(c.KubeVersion) {
			rep.set(s.name, m, result{outcome: "n/a", notes: []string{"RestartAllContainers is not in Kubernetes " + c.KubeVersion}})
			continue
		}
		p := pending{s, make(chan result, 1)}
		runs = append(runs, p)
		if s.disruptive {
			disruptive = append(disruptive, p)
			continue
		}
		concurrent.Go(func() { p.done <- runOne(p.s) })
	}
	// A disruptive scenario (it restarts the kubelet, which forgets every
	// pod's back-off and re-reads every status) runs alone, after the
	// others, one at a time: upstream marks such tests Serial and Disruptive.
	go func() {
		concurrent.Wait()
		for _, p := range disruptive {
			p.done <- runOne(p.s)
		}
	}()
	for _, p := range runs {
		s := p.s
		t.Run(s.name, func(t *testing.T) {
			r := <-p.done
			rep.set(s.name, m, r)
			if r.err != nil {
				t.Fatalf("%s (%s): %v", s.name, m, r.err)
			}
			t.Logf("%s (%s): %s; kubelet restarts %d, supervisor restarts %d, latency %s %v",
				s.name, m, r.outcome, r.kubeletRestarts, r.supRestarts, r.latency, r.notes)
			want := s.want[m]
			if m == auto {
				want = autoWant(s, r.admitted)
				t.Logf("%s (auto): %s", s.name, r.choice)
				if err := autoChoiceError(s, older(c.APIServerVersion, c.KubeVersion), rep.kubeletGates, r.admitted); err != nil {
					t.Errorf("%s (auto): --native=auto chose wrongly: %v", s.name, err)
				}
			}
			switch {
			case r.outcome == want:
			case s.runtimeRace != "" && r.outcome == s.runtimeRace && (m == native || (m == auto && !anyWrapped(r.admitted))):
				t.Logf("%s (%s): the unsupervised reference lost a known runtime race: %s", s.name, m, s.raceWhy)
			default:
				t.Errorf("%s (%s): outcome %q, want %q", s.name, m, r.outcome, want)
			}
		})
	}
	rep.setHow(m, e.how)
	if m == supervised && os.Getenv("E2E_SUPERVISE") != "injector" {
		rep.setAuto(webhookConclusion(c.LogPath("restart-injector")))
	}
}

// selected are the scenarios E2E_SCENARIOS names, all when it is empty.
func selected() []scenario {
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("E2E_SCENARIOS"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	var out []scenario
	for _, s := range scenarios() {
		if len(only) == 0 || only[s.name] {
			out = append(out, s)
		}
	}
	return out
}

var (
	nativeHonoured = regexp.MustCompile(`\bhonoured=(\w+)`)
	nativeReason   = regexp.MustCompile(`\breason="((?:[^"\\]|\\.)*)"`)
)

// webhookConclusion is what the webhook's --native=auto last concluded,
// from its "native restart rules" log line: whether the cluster honours
// the rules itself (pods then admitted untouched) and why; "" when the
// log has no such line.
func webhookConclusion(logPath string) string {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	var last string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `msg="native restart rules"`) {
			last = l
		}
	}
	h, r := nativeHonoured.FindStringSubmatch(last), nativeReason.FindStringSubmatch(last)
	if h == nil || r == nil {
		return ""
	}
	reason := strings.ReplaceAll(r[1], `\"`, `"`)
	if h[1] == "true" {
		return "native for the restart rules (such pods admitted untouched): " + reason
	}
	return "inject (pods with rules wrapped): " + reason
}

// superviseWithInjector mutates every pod and Job with the project's
// injector before creating it: the same mutation the webhook applies.
func (e *env) superviseWithInjector() {
	inj := injector.New(injector.Options{SupervisorImage: cluster.SupervisorImage, ImagePullPolicy: corev1.PullNever,
		Delivery: injector.Delivery(e.delivery)})
	e.how = "injector.MutatePod / MutateObject before create"
	e.mutatePod = func(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
		r, err := inj.MutatePod(ctx, pod)
		if err != nil {
			return nil, err
		}
		if !r.Injected {
			return pod, nil
		}
		return r.Pod, nil
	}
	e.mutateObject = func(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		r, err := inj.MutateObject(ctx, obj)
		if err != nil {
			return nil, err
		}
		return r.Object, nil
	}
	e.mutateJob = func(ctx context.Context, job *batchv1.Job) (*batchv1.Job, error) {
		job = job.DeepCopy()
		job.APIVersion, job.Kind = "batch/v1", "Job"
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(job)
		if err != nil {
			return nil, err
		}
		mutated, err := e.mutateObject(ctx, &unstructured.Unstructured{Object: u})
		if err != nil {
			return nil, err
		}
		out := &batchv1.Job{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(mutated.Object, out); err != nil {
			return nil, err
		}
		return out, nil
	}
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// report collects results across both modes.
type report struct {
	mu      sync.Mutex
	results map[string]map[mode]result
	upTime  map[mode]time.Duration
	runTime map[mode]time.Duration
	how     map[mode]string
	started time.Time
	version string // of the cluster's kubelet, "v1.34.4"
	// apiVersion is the API server's: version but under E2E_KUBELET_BIN_DIR.
	apiVersion string
	auto       string // what the webhook's --native=auto concluded (webhookConclusion)
	// autoDefaults is the same in the auto run, at the release's default gates.
	autoDefaults string
	// kubeletGates are set on the kubelet only (E2E_KUBELET_GATES).
	kubeletGates []cluster.FeatureGate
	// containerdDir and delivery are E2E_CONTAINERD_DIR and E2E_DELIVERY:
	// containerd 2 and the image-volume delivery (`make
	// conformance-image`), written to a file of their own.
	containerdDir, delivery string
	// autoChose is what the webhook's --delivery=auto chose, when
	// delivery is auto.
	autoChose string
}

func (r *report) setDeliveredAs(d string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.autoChose = d
}

// deliveredAs is how the supervised run's wrapped pods got the binaries:
// E2E_DELIVERY, or what auto chose.
func (r *report) deliveredAs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.delivery == "auto" {
		return r.autoChose
	}
	return r.delivery
}

// runtimeLine says which runtime the nodes ran, for a report's header.
func (r *report) runtimeLine() string {
	if r.containerdDir == "" {
		return "Debian containerd and runc, cgroupfs"
	}
	return runtimeOf(r.containerdDir) + " and Debian's runc, cgroupfs"
}

// runtimeOf names the nodes' containerd: Debian's, or the build of
// hack/containerd.sh in containerdDir.
func runtimeOf(containerdDir string) string {
	if containerdDir == "" {
		return "Debian's containerd 1.6"
	}
	v, _ := os.ReadFile(filepath.Join(containerdDir, "VERSION"))
	return "containerd " + strings.TrimSpace(string(v)) + " built from the Go module proxy (hack/containerd.sh)"
}

func (r *report) setAutoDefaults(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.autoDefaults = s
}

func (r *report) setAuto(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.auto = s
}

func (r *report) setVersion(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.version = v
	if r.apiVersion == "" {
		r.apiVersion = v
	}
}

func (r *report) setAPIVersion(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apiVersion = v
}

func (r *report) set(name string, m mode, res result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.results[name] == nil {
		r.results[name] = map[mode]result{}
	}
	r.results[name][m] = res
}

func (r *report) setUp(m mode, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.upTime == nil {
		r.upTime = map[mode]time.Duration{}
	}
	r.upTime[m] = d
}

func (r *report) setRun(m mode, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runTime == nil {
		r.runTime = map[mode]time.Duration{}
	}
	r.runTime[m] = d
}

func (r *report) setHow(m mode, how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.how == nil {
		r.how = map[mode]string{}
	}
	r.how[m] = how
}
