//go:build upstream

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestUpstreamSpecs runs upstream Kubernetes' own e2e specs for container
// restart rules and RestartAllContainers (test/e2e/common/node/
// container_restart_policy.go of the cluster's release), as written, through
// upstream's framework and RunE2ETests (hack/upstream-e2e.sh builds them into
// e2e-node-specs.test), against the harness's cluster: natively (the gates
// on) and supervised (the gates off, every pod through the restart-injector
// webhook). It writes docs/upstream-e2e-<release>.md: one row per spec, each
// mode's result, and for a supervised failure the failed assertion, the
// pod's container statuses and the supervisor's log lines.
//
//	make upstream-e2e
//	go test -tags upstream -run TestUpstreamSpecs -v -timeout 90m ./test/e2e
//
// Behind the upstream build tag: a run takes about half an hour (a spec
// waits up to 10 minutes for a restartCount that an in-place restart never
// moves). Root. KUBE_BIN_DIR picks the release (it needs kube-scheduler:
// upstream's pods carry no node name); UPSTREAM_E2E_BIN_DIR the spec binary
// (else hack/upstream-e2e.sh builds it for the release); E2E_MODES one mode
// (the file is then written only with UPSTREAM_WRITE_REPORT=1).
func TestUpstreamSpecs(t *testing.T) {
	repo, binDir := prepareNode(t)
	version, err := cluster.KubeVersion(binDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(binDir, "kube-scheduler")); err != nil {
		t.Fatalf("kube-scheduler missing in %s: upstream's pods carry no node name (KUBE_VERSION=%s hack/kube-binaries.sh kube-scheduler)", binDir, version)
	}
	specDir := os.Getenv("UPSTREAM_E2E_BIN_DIR")
	if specDir == "" {
		cmd := exec.Command(filepath.Join(repo, "hack", "upstream-e2e.sh"))
		cmd.Env = append(os.Environ(), "KUBE_VERSION="+version)
		cmd.Stderr = testWriter{t}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hack/upstream-e2e.sh: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		specDir = lines[len(lines)-1]
	}
	bin := filepath.Join(specDir, "e2e-node-specs.test")
	work := t.TempDir()
	specs, err := listUpstreamSpecs(bin, work)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) == 0 {
		t.Fatalf("%s: no spec matches %s", bin, upstreamFocus)
	}
	t.Logf("%d upstream specs in %s", len(specs), bin)
	refs, err := upstreamBusyboxRefs(bin)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	for i, ref := range refs {
		dir := filepath.Join(work, fmt.Sprint("busybox-", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		image, err := cluster.BuildBusyboxImageAs(dir, ref)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, image)
	}

	modes := []mode{native, supervised}
	if m := os.Getenv("E2E_MODES"); m != "" {
		modes = nil
		for _, s := range strings.Split(m, ",") {
			modes = append(modes, mode(strings.TrimSpace(s)))
		}
	}
	rep := &upstreamReport{version: version, specs: specs, started: time.Now().UTC(), images: map[string]bool{},
		results: map[mode][]upstreamResult{}, took: map[mode]time.Duration{}}
	for _, m := range modes {
		if m != native && m != supervised {
			t.Fatalf("E2E_MODES: %q: native or supervised", m)
		}
		t.Run(string(m), func(t *testing.T) { runUpstreamMode(t, m, repo, binDir, bin, images, rep) })
	}
	t.Log("\n" + rep.table())
	ran := map[mode]bool{}
	for _, m := range modes {
		ran[m] = true
	}
	if ran[native] && ran[supervised] || os.Getenv("UPSTREAM_WRITE_REPORT") == "1" {
		docs := filepath.Join(repo, "docs")
		path := filepath.Join(docs, "upstream-e2e-"+version+".md")
		if err := os.WriteFile(path, []byte(rep.render()), 0o644); err != nil {
			t.Fatal(err)
		}
		// The matrix links every release's file (renderMatrix).
		if err := writeMatrix(docs); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s and docs/conformance.md", path)
	}
	// A supervised failure is expected where restartCount is asserted (by
	// design); a failure of its own kind, or any native failure, is not.
	for _, m := range modes {
		for _, r := range rep.results[m] {
			switch {
			case r.state == "passed" || r.state == "n/a":
			case m == supervised && (r.class == classRestartCount || r.class == classHold):
			default:
				t.Errorf("%s (%s): %s: %s", r.spec.name(), m, r.state, r.message)
			}
		}
	}
}

// upstreamFocus selects the two SIGDescribes of container_restart_policy.go.
const upstreamFocus = `Pod Extended \(container restart policy\)|Pod Extended \(RestartAllContainers\)`

// ginkgoReport is what this test reads of Ginkgo v2's JSON report
// (types.Report).
type ginkgoReport struct {
	SpecReports []ginkgoSpec
}

type ginkgoLocation struct {
	FileName   string
	LineNumber int
}

type ginkgoSpec struct {
	ContainerHierarchyTexts    []string
	LeafNodeType               string
	LeafNodeText               string
	LeafNodeLocation           ginkgoLocation
	State                      string
	RunTime                    time.Duration
	CapturedGinkgoWriterOutput string
	Failure                    struct {
		Message             string
		Location            ginkgoLocation
		FailureNodeLocation ginkgoLocation
	}
}

// upstreamSpec is one It of the upstream file.
type upstreamSpec struct {
	describe  string // "Pod Extended (container restart policy)"
	container string // "Container Restart Rules"
	leaf      string // "should restart container on rule match"
	location  string // test/e2e/common/node/container_restart_policy.go:47
	needsRAC  bool   // RestartAllContainers
}

func (s upstreamSpec) name() string { return s.describe + " › " + s.container + " › " + s.leaf }

// focus selects this spec alone.
func (s upstreamSpec) focus() string {
	// The framework appends the spec's labels to its text ("… [Beta]
	// [NodeConformance]").
	return regexp.QuoteMeta(s.describe) + `.* ` + regexp.QuoteMeta(s.leaf) + `( \[|$)`
}

var labelText = regexp.MustCompile(`\s*\[[^\]]*\]`)

// cleanText drops the framework's "[sig-node]" and "[Label]" decorations.
func cleanText(s string) string { return strings.TrimSpace(labelText.ReplaceAllString(s, "")) }

// upstreamFile is a location relative to the k8s.io/kubernetes module.
func upstreamFile(l ginkgoLocation) string {
	f := filepath.ToSlash(l.FileName)
	if i := strings.Index(f, "k8s.io/kubernetes@"); i >= 0 {
		f = f[i+len("k8s.io/kubernetes@"):]
		if j := strings.Index(f, "/"); j >= 0 {
			f = f[j+1:]
		}
	}
	return fmt.Sprintf("%s:%d", f, l.LineNumber)
}

func readGinkgoReport(path string) ([]ginkgoSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reps []ginkgoReport
	if err := json.Unmarshal(b, &reps); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []ginkgoSpec
	for _, r := range reps {
		for _, s := range r.SpecReports {
			if s.LeafNodeType == "It" {
				out = append(out, s)
			}
		}
	}
	return out, nil
}

// listUpstreamSpecs asks the binary (a Ginkgo dry run) which specs the two
// SIGDescribes hold, and where.
func listUpstreamSpecs(bin, work string) ([]upstreamSpec, error) {
	report := filepath.Join(work, "list.json")
	cmd := exec.Command(bin, "--ginkgo.dry-run", "--ginkgo.focus="+upstreamFocus, "--ginkgo.json-report="+report,
		"--ginkgo.no-color", "--provider=skeleton", "--kubeconfig=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s --ginkgo.dry-run: %v\n%s", bin, err, tail(string(out), 3000))
	}
	got, err := readGinkgoReport(report)
	if err != nil {
		return nil, err
	}
	var specs []upstreamSpec
	for _, s := range got {
		if s.State == "skipped" || s.State == "pending" {
			continue
		}
		sp := upstreamSpec{leaf: cleanText(s.LeafNodeText), location: upstreamFile(s.LeafNodeLocation)}
		if len(s.ContainerHierarchyTexts) > 0 {
			sp.describe = cleanText(s.ContainerHierarchyTexts[0])
		}
		if len(s.ContainerHierarchyTexts) > 1 {
			sp.container = cleanText(strings.Join(s.ContainerHierarchyTexts[1:], " "))
		}
		sp.needsRAC = strings.Contains(sp.describe, "RestartAllContainers")
		specs = append(specs, sp)
	}
	sort.SliceStable(specs, func(i, j int) bool { return lineOf(specs[i].location) < lineOf(specs[j].location) })
	return specs, nil
}

func lineOf(loc string) int {
	var n int
	if i := strings.LastIndex(loc, ":"); i >= 0 {
		fmt.Sscan(loc[i+1:], &n)
	}
	return n
}

// upstreamBusyboxRefs are the busybox images of the binary's release, from
// its --list-images: imageutils.GetE2EImage(imageutils.BusyBox), which the
// specs use, and any other tag of it the release lists (v1.37.2 lists
// busybox:1.37.0-2 and 1.36.1-1). The node gets each, so that no pod pulls.
func upstreamBusyboxRefs(bin string) ([]string, error) {
	out, err := exec.Command(bin, "--list-images").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-images: %w", bin, err)
	}
	var refs []string
	for _, l := range strings.Fields(string(out)) {
		if strings.Contains(l, "/e2e-test-images/busybox:") {
			refs = append(refs, l)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s --list-images names no e2e-test-images busybox:\n%s", bin, out)
	}
	return refs, nil
}

const (
	classRestartCount = "restartCount by design"
	// classHold: the one case README and docs/supervisor.md document as
	// not emulated (a container that must not restart in a pod whose
	// policy is Always is held idle, Running, instead of Terminated):
	// conformance scenario C.
	classHold  = "hold by design"
	classOther = "other (finding)"
)

// upstreamResult is one spec's outcome in one mode.
type upstreamResult struct {
	spec     upstreamSpec
	state    string // passed, failed, timedout, ... or n/a
	runTime  time.Duration
	message  string // the first failure message
	at       string // where it failed, upstream file:line
	class    string // for a supervised failure
	why      string // the classification's reason
	evidence string // container statuses and supervisor log lines
}

type upstreamReport struct {
	mu      sync.Mutex
	version string
	images  map[string]bool // of the specs' pods
	specs   []upstreamSpec
	started time.Time
	results map[mode][]upstreamResult
	took    map[mode]time.Duration
	upTook  map[mode]time.Duration
	how     string
}

func runUpstreamMode(t *testing.T, m mode, repo, binDir, bin string, images []string, rep *upstreamReport) {
	results := make([]upstreamResult, len(rep.specs))
	defer func() {
		rep.mu.Lock()
		rep.results[m] = results
		rep.mu.Unlock()
	}()
	for i, s := range rep.specs {
		results[i] = upstreamResult{spec: s, state: "not run"}
	}
	if m == native && !cluster.RestartRulesNative(rep.version) {
		for i := range results {
			results[i].state, results[i].message = "n/a", "restart rules are not in Kubernetes "+rep.version
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := cluster.Up(ctx, cluster.Options{
		BinDir:            binDir,
		Repo:              repo,
		RestartRules:      m == native,
		ControllerManager: true,
		// Upstream's pods carry no node name and its framework waits for
		// each namespace's default ServiceAccount and kube-root-ca.crt, and
		// for the node to be schedulable (untainted): kube-scheduler and
		// the serviceaccount, root-ca-cert-publisher and nodelifecycle
		// controllers.
		Workloads:       true,
		SupervisorImage: m != native,
		Images:          images,
		Log:             testWriter{t},
	})
	if err != nil {
		t.Fatalf("cluster up (%s): %v", m, err)
	}
	tearDownAtEnd(t, c)
	if m == supervised {
		if err := c.StartWebhook(ctx, repo); err != nil {
			t.Fatalf("webhook: %v\n%s", err, tailFile(c.LogPath("restart-injector")))
		}
		rep.mu.Lock()
		rep.how = "the restart-injector webhook on the host, registered from deploy/base/webhook.yaml (`--native=auto`)"
		rep.mu.Unlock()
	}
	upTook := time.Since(start)

	// The pods' last statuses (RestartAllContainers specs delete their
	// pod) and their log files (the kubelet removes them with the pod).
	work := t.TempDir()
	logs := filepath.Join(work, "pod-logs")
	pods := &podStore{pods: map[string]*corev1.Pod{}}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var collectors sync.WaitGroup
	collectors.Go(func() { pods.watch(watchCtx, c) })
	collectors.Go(func() {
		for {
			copyLogs(filepath.Join(c.Dir, "pod-logs"), logs)
			select {
			case <-watchCtx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	})

	// Each spec in its own process, all at once: upstream marks them
	// neither Serial nor Disruptive, and each waits minutes for
	// restarts; each gets its own namespace.
	runStart := time.Now()
	type proc struct {
		report, log string
		runID       string
		err         error
	}
	procs := make([]proc, len(rep.specs))
	var wg sync.WaitGroup
	for i, s := range rep.specs {
		if m == native && s.needsRAC && !cluster.RestartAllContainersNative(c.KubeVersion) {
			results[i].state, results[i].message = "n/a", "RestartAllContainers is not in Kubernetes "+c.KubeVersion
			continue
		}
		dir := filepath.Join(work, fmt.Sprintf("spec-%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		procs[i] = proc{report: filepath.Join(dir, "report.json"), log: filepath.Join(dir, "output.log")}
		wg.Go(func() {
			out, err := os.Create(procs[i].log)
			if err != nil {
				procs[i].err = err
				return
			}
			defer out.Close()
			cmd := exec.CommandContext(ctx, bin,
				"--kubeconfig="+c.Kubeconfig, "--provider=skeleton",
				"--ginkgo.focus="+s.focus(), "--ginkgo.json-report="+procs[i].report,
				"--ginkgo.no-color", "--ginkgo.v", "--ginkgo.timeout=40m",
				"--report-dir="+dir,
				// Nothing beyond the harness's own cluster: no log-dump.sh
				// (ssh to nodes), no kubelet calls through the API
				// server's node proxy on failure; a failed spec's
				// namespace is kept for the evidence below.
				"--disable-log-dump", "--dump-logs-on-failure=false", "--delete-namespace-on-failure=false",
			)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
			cmd.Stdout, cmd.Stderr = out, out
			procs[i].err = cmd.Run()
		})
	}
	wg.Wait()
	runTook := time.Since(runStart)
	stopWatch()
	collectors.Wait()
	copyLogs(filepath.Join(c.Dir, "pod-logs"), logs)

	runIDs := map[string]string{} // e2e-run label → namespace
	if nss, err := c.Client.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, ns := range nss.Items {
			if id := ns.Labels["e2e-run"]; id != "" {
				runIDs[ns.Name] = id
			}
		}
	}
	rep.mu.Lock()
	for ns := range runIDs {
		for _, p := range pods.in(ns) {
			for _, ctr := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
				if !strings.HasPrefix(ctr.Image, cluster.SupervisorImage) {
					rep.images[ctr.Image] = true
				}
			}
		}
	}
	rep.mu.Unlock()
	for i := range rep.specs {
		if results[i].state == "n/a" {
			continue
		}
		p := procs[i]
		b, _ := os.ReadFile(p.log)
		runID := ""
		if mm := runIDLine.FindSubmatch(b); mm != nil {
			runID = string(mm[1])
		}
		got, err := readGinkgoReport(p.report)
		var ran []ginkgoSpec
		for _, s := range got {
			if s.State != "skipped" {
				ran = append(ran, s)
			}
		}
		switch {
		case err != nil:
			results[i].state, results[i].message = "error", fmt.Sprintf("no report (%v; exit %v): %s", err, p.err, tail(string(b), 1500))
		case len(ran) != 1:
			results[i].state, results[i].message = "error", fmt.Sprintf("the focus ran %d specs, want 1", len(ran))
		default:
			s := ran[0]
			results[i].state, results[i].runTime = s.State, s.RunTime
			if s.State != "passed" {
				results[i].message = s.Failure.Message
				results[i].at = upstreamFile(s.Failure.Location)
			}
		}
		if results[i].state != "passed" {
			var nsList []string
			for ns, id := range runIDs {
				if id == runID {
					nsList = append(nsList, ns)
				}
			}
			sort.Strings(nsList)
			results[i].evidence, results[i].class, results[i].why = evidence(m, results[i], nsList, pods, logs)
			// Whether it was expected is TestUpstreamSpecs' to say.
			t.Logf("%s (%s): %s at %s: %s [%s]\n%s", rep.specs[i].name(), m, results[i].state, results[i].at,
				summary(results[i].message), results[i].class, results[i].evidence)
			t.Logf("output of the spec's process (%s):\n%s", p.log, tail(string(b), 3000))
		} else {
			t.Logf("%s (%s): passed in %s", rep.specs[i].name(), m, results[i].runTime.Round(time.Second))
		}
	}
	rep.mu.Lock()
	if rep.upTook == nil {
		rep.upTook = map[mode]time.Duration{}
	}
	rep.upTook[m] = upTook
	rep.took[m] = runTook
	rep.mu.Unlock()
}

// runIDLine is RunE2ETests' first log line; the framework labels each
// namespace it creates e2e-run=<run id>.
var runIDLine = regexp.MustCompile(`Starting e2e run "([0-9a-f-]+)"`)

// podStore keeps the last state of every pod seen.
type podStore struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod // namespace/name
}

func (s *podStore) watch(ctx context.Context, c *cluster.Cluster) {
	for ctx.Err() == nil {
		list, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		s.mu.Lock()
		for i := range list.Items {
			p := list.Items[i]
			s.pods[p.Namespace+"/"+p.Name] = &p
		}
		s.mu.Unlock()
		w, err := c.Client.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			s.mu.Lock()
			// A RestartAllContainers spec deletes its pod when it ends,
			// failed or not: keep the status it had before, not the
			// containers' exits on deletion.
			if key := p.Namespace + "/" + p.Name; s.pods[key] == nil || p.DeletionTimestamp == nil {
				s.pods[key] = p
			}
			s.mu.Unlock()
		}
		w.Stop()
	}
}

func (s *podStore) in(ns string) []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range s.pods {
		if p.Namespace == ns {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// copyLogs copies the kubelet's pod log files that grew since the last
// copy: the kubelet removes them with their pod.
func copyLogs(from, to string) {
	_ = filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		src, err1 := os.Stat(path)
		old, err2 := os.Stat(dst)
		if err1 != nil || err2 == nil && old.Size() >= src.Size() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		_ = os.MkdirAll(filepath.Dir(dst), 0o755)
		_ = os.WriteFile(dst, b, 0o644)
		return nil
	})
}

var (
	supervisorLine = regexp.MustCompile(`logger=restart-supervisor`)
	inPlace        = regexp.MustCompile(`restarting in place|restarting the pod's containers in place|pod restart; stopping the workload`)
	restartWait    = regexp.MustCompile(`failed to see (container restart|all containers restart)`)
	terminateWait  = regexp.MustCompile(`failed to wait for pod terminate`)
	holding        = regexp.MustCompile(`holding the container idle`)
)

// evidence describes a failed spec's pods: each container's status as the
// kubelet last reported it and the supervisor's log lines, and classifies
// a supervised failure: restartCount by design when the spec failed
// waiting for restartCount (or lastTerminationState) and the supervisor of
// the pod logged restarts in place; anything else is a finding.
func evidence(m mode, r upstreamResult, namespaces []string, store *podStore, logs string) (ev, class, why string) {
	var b strings.Builder
	restartedInPlace, held := false, false
	for _, ns := range namespaces {
		for _, p := range store.in(ns) {
			wrapped := "not wrapped"
			if _, ok := p.Annotations[contract.AnnotationStatus]; ok {
				wrapped = "wrapped by the webhook"
			}
			fmt.Fprintf(&b, "pod %s/%s (%s), phase %s:\n", p.Namespace, p.Name, wrapped, p.Status.Phase)
			for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
				fmt.Fprintf(&b, "  %s: %s, restartCount %d, lastTerminationState %s\n", cs.Name, stateOf(cs.State),
					cs.RestartCount, stateOf(cs.LastTerminationState))
			}
			files, _ := filepath.Glob(filepath.Join(logs, p.Namespace+"_"+p.Name+"_*", "*", "*.log"))
			sort.Strings(files)
			for _, f := range files {
				lines := supervisorLines(f)
				if len(lines) == 0 {
					continue
				}
				fmt.Fprintf(&b, "  supervisor log of %s (%s):\n", filepath.Base(filepath.Dir(f)), filepath.Base(f))
				for _, l := range lines {
					restartedInPlace = restartedInPlace || inPlace.MatchString(l)
					held = held || holding.MatchString(l)
					b.WriteString("    " + l + "\n")
				}
			}
		}
	}
	if len(namespaces) == 0 {
		b.WriteString("(no namespace of this spec's run found)\n")
	}
	if m != supervised {
		return b.String(), "", ""
	}
	switch {
	case restartWait.MatchString(r.message) && restartedInPlace:
		return b.String(), classRestartCount, "the spec waits for restartCount > 0 (and a lastTerminationState); the supervisor restarted in place, which neither moves"
	case restartWait.MatchString(r.message):
		return b.String(), classOther, "the spec waited for restartCount, but the supervisor logged no restart in place"
	case terminateWait.MatchString(r.message) && held:
		return b.String(), classHold, "the spec waits for the pod to stop running; its container must not restart " +
			"(container restartPolicy Never) but the pod's restartPolicy Always would make the kubelet restart it, so the " +
			"supervisor holds the container idle, Running, until it is stopped: the one case the supervisor documents it " +
			"cannot emulate (README, docs/supervisor.md; conformance scenario C)"
	}
	return b.String(), classOther, "not a restartCount assertion"
}

func stateOf(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.UTC().Format("15:04:05")
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (exit %d, %s)", s.Terminated.ExitCode, s.Terminated.Reason)
	case s.Waiting != nil:
		return "waiting (" + s.Waiting.Reason + ")"
	}
	return "none"
}

// supervisorLines are the supervisor's lines of a CRI log file, without the
// CRI prefix and the repeated logger attribute, at most 40 (the first 20
// and the last 20).
func supervisorLines(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !supervisorLine.MatchString(l) {
			continue
		}
		// "2026-12-06T06:01:02.123456789Z stderr F level=INFO msg=..."
		if f := strings.SplitN(l, " ", 4); len(f) == 4 {
			l = f[3]
		}
		l = strings.Replace(l, " logger=restart-supervisor", "", 1)
		lines = append(lines, l)
	}
	if len(lines) > 40 {
		lines = append(append(lines[:20:20], fmt.Sprintf("… %d lines …", len(lines)-40)), lines[len(lines)-20:]...)
	}
	return lines
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

var (
	// Gomega's "expected pod to be <condition>, got instead: <the pod's
	// YAML>" and the error a matcher returned ("s: \"…\"").
	expectedPod = regexp.MustCompile(`(expected pod to be [^,\n]*), got instead:`)
	matcherErr  = regexp.MustCompile(`\bs: "((?:[^"\\]|\\.)*)"`)
)

// summary is a failure message without the pod's YAML that Gomega
// appends: its first line and what it expected or the matcher's error.
func summary(msg string) string {
	parts := []string{strings.TrimSuffix(firstLine(msg), ".")}
	if m := expectedPod.FindStringSubmatch(msg); m != nil {
		parts = append(parts, m[1]+" (the pod as below)")
	}
	if m := matcherErr.FindStringSubmatch(msg); m != nil {
		parts = append(parts, "the condition's last error: "+m[1])
	}
	return strings.Join(parts, "; ")
}

// reason is a failure message in one line for the table.
func reason(r upstreamResult) string {
	msg := summary(r.message)
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return strings.ReplaceAll(msg, "|", "/")
}

func (r *upstreamReport) counts(m mode) (passed, ran int, byClass map[string]int) {
	byClass = map[string]int{}
	for _, res := range r.results[m] {
		if res.state == "n/a" || res.state == "not run" {
			continue
		}
		ran++
		if res.state == "passed" {
			passed++
		} else if res.class != "" {
			byClass[res.class]++
		}
	}
	return passed, ran, byClass
}

func (r *upstreamReport) summary() string {
	var parts []string
	for _, m := range []mode{native, supervised} {
		if _, ok := r.results[m]; !ok {
			parts = append(parts, string(m)+" not run")
			continue
		}
		p, n, by := r.counts(m)
		s := fmt.Sprintf("%s %d/%d", m, p, n)
		if m == supervised && n > p {
			var cl []string
			for _, k := range []string{classRestartCount, classHold, classOther} {
				if by[k] > 0 {
					cl = append(cl, fmt.Sprintf("%d %s", by[k], k))
				}
			}
			s += " (" + strings.Join(cl, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func resultCell(res upstreamResult, ok bool) string {
	switch {
	case !ok:
		return "not run"
	case res.state == "passed":
		return fmt.Sprintf("passed (%s)", res.runTime.Round(time.Second))
	case res.state == "n/a":
		return "n/a: " + res.message
	case res.runTime > 0:
		return fmt.Sprintf("**%s** (%s)", res.state, res.runTime.Round(time.Second))
	}
	return "**" + res.state + "**"
}

// table is the per-spec table (Markdown).
func (r *upstreamReport) table() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tableLocked()
}

func (r *upstreamReport) tableLocked() string {
	var b strings.Builder
	b.WriteString("| # | Spec | Upstream | Native (gates on) | Supervised (gates off + webhook) | Supervised failure: first failure message, where | Classification |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for i, s := range r.specs {
		n, nok := r.resultOf(native, i)
		sv, sok := r.resultOf(supervised, i)
		why, class := "–", "–"
		if sok && sv.state != "passed" && sv.state != "n/a" {
			why = reason(sv)
			if sv.at != "" {
				why += " (at " + sv.at + ")"
			}
			class = sv.class
			if class == "" {
				class = classOther
			}
		}
		fmt.Fprintf(&b, "| %d | %s › %s › %s | [%s](https://github.com/kubernetes/kubernetes/blob/%s/%s) | %s | %s | %s | %s |\n",
			i+1, s.describe, s.container, s.leaf, s.location, r.version, strings.Replace(s.location, ":", "#L", 1),
			resultCell(n, nok), resultCell(sv, sok), why, class)
	}
	return b.String()
}

func (r *upstreamReport) resultOf(m mode, i int) (upstreamResult, bool) {
	res, ok := r.results[m]
	if !ok || i >= len(res) {
		return upstreamResult{}, false
	}
	return res[i], true
}

// imageList names the images the specs' pods ran, in backquotes.
func (r *upstreamReport) imageList() string {
	var l []string
	for im := range r.images {
		l = append(l, "`"+im+"`")
	}
	sort.Strings(l)
	if len(l) == 0 {
		return "the release's e2e-test-images busybox"
	}
	return strings.Join(l, ", ")
}

// render is docs/upstream-e2e-<release>.md.
func (r *upstreamReport) render() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Upstream's e2e specs for restart rules on Kubernetes %s: native vs supervised\n\n", r.version)
	b.WriteString("Generated by test/e2e `TestUpstreamSpecs` (upstream_test.go, `make upstream-e2e`); do not edit by hand.\n\n")
	fmt.Fprintf(&b, "**%s: %s.**\n\n", r.version, r.summary())
	file := "test/e2e/common/node/container_restart_policy.go"
	if len(r.specs) > 0 {
		file, _, _ = strings.Cut(r.specs[0].location, ":")
	}
	fmt.Fprintf(&b, "Upstream Kubernetes' own e2e specs for container restart rules (KEP-5307) and RestartAllContainers (KEP-5532), "+
		"k8s.io/kubernetes@%[1]s [%[2]s](https://github.com/kubernetes/kubernetes/blob/%[1]s/%[2]s), the SIGDescribes "+
		"\"Pod Extended (container restart policy)\" and \"Pod Extended (RestartAllContainers)\", run as written, through upstream's "+
		"e2e framework and `RunE2ETests` (`hack/upstream-e2e.sh` builds them into a test binary of the node specs only), against "+
		"test/e2e's single-node cluster of the same release (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and "+
		"a kubelet over Debian's containerd; `--provider=skeleton`). Each spec runs in its own process, all at once (upstream marks "+
		"them neither Serial nor Disruptive), each in the namespace the framework creates. Their image, %[3]s, is Debian's "+
		"busybox-static imported under that reference (no registry is reachable).\n\n", r.version, file, r.imageList())
	fmt.Fprintf(&b, "- Native: the release's restart-rules gates on in the API server and the kubelet.\n")
	fmt.Fprintf(&b, "- Supervised: the gates off and every pod through %s, which wraps each pod with rules or a container "+
		"`restartPolicy` under restart-supervisor (a pod with neither is never sent to it, and the kubelet runs it as written).\n\n", r.how)
	fmt.Fprintf(&b, "Run %s on a 2-core machine (%s).", r.started.Format("2006-01-02 15:04 MST"), "root, other work beside it")
	for _, m := range []mode{native, supervised} {
		if d, ok := r.took[m]; ok {
			fmt.Fprintf(&b, " %s: cluster up %s, specs %s.", strings.ToUpper(string(m[:1]))+string(m[1:]),
				r.upTook[m].Round(time.Second), d.Round(time.Second))
		}
	}
	b.WriteString("\n\n")
	b.WriteString("In place, the kubelet's `restartCount` does not move and a container gets no `lastTerminationState`: both count " +
		"the kubelet's re-creations of a container, and the supervisor restarts the workload inside the same container " +
		"([pod-level.md](pod-level.md), [supervisor.md](supervisor.md)). A supervised failure is classed *" + classRestartCount +
		"* when the spec failed waiting for them and the pod's supervisor logged its restarts in place; *" + classHold +
		"* when the spec waited for the pod to stop running and the supervisor logged that it holds the container " +
		"(the case the README documents as not emulated); anything else is a finding. Each failure is described below with " +
		"the pod's container statuses as the kubelet last reported them before the pod's deletion, and the supervisor's log lines.\n\n")
	b.WriteString(r.tableLocked())
	var ev strings.Builder
	for i, s := range r.specs {
		for _, m := range []mode{native, supervised} {
			res, ok := r.resultOf(m, i)
			if !ok || res.state == "passed" || res.state == "n/a" || res.state == "not run" {
				continue
			}
			fmt.Fprintf(&ev, "### %d. %s (%s)\n\n", i+1, s.leaf, m)
			if res.class != "" {
				fmt.Fprintf(&ev, "%s: %s.\n\n", res.class, res.why)
			}
			fmt.Fprintf(&ev, "Failed at %s: %s.\n\n", res.at, strings.TrimSuffix(summary(res.message), "."))
			if res.evidence != "" {
				fmt.Fprintf(&ev, "The spec's pod as the kubelet last reported it, and the supervisor's log:\n\n```\n%s```\n\n", res.evidence)
			}
		}
	}
	if ev.Len() > 0 {
		b.WriteString("\n## Failures\n\n")
		b.WriteString(ev.String())
	}
	return b.String()
}
