//go:build gang

package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// apiWrites counts the requests that change something (every verb but GET)
// a client sends, Events apart.
type apiWrites struct {
	next   http.RoundTripper
	n      *atomic.Int64
	events *atomic.Int64
}

func (w apiWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	switch {
	case r.Method == http.MethodGet:
	case strings.Contains(r.URL.Path, "/events"):
		w.events.Add(1)
	default:
		w.n.Add(1)
	}
	return w.next.RoundTrip(r)
}

// gangSizes are the group sizes GANG_SIZES asks for (default 2, 8, 64).
func gangSizes() []int {
	out := []int{2, 8, 64}
	if v := os.Getenv("GANG_SIZES"); v != "" {
		out = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n >= 2 {
				out = append(out, n)
			}
		}
	}
	return out
}

func gangRuns() int {
	if n, err := strconv.Atoi(os.Getenv("GANG_RUNS")); err == nil && n > 0 {
		return n
	}
	return 5
}

// gangScript is every rank's workload: it marks each start (with the
// JobSet restart attempt, empty for supervised pods) and each stop; the
// rank whose RANK is 0 exits 42 whenever the test drops /ctl/fail.
const gangScript = `trap 'mark STOP; exit 0' TERM; mark START$ATTEMPT
if [ "$RANK" = 0 ]; then while :; do if [ -e /ctl/fail ]; then rm -f /ctl/fail; mark EXIT; exit 42; fi; sleep 0.05; done; fi
sleep 3600 & wait`

// gangPodSpec is a rank's pod spec: the events and control directories
// of the size's run on the host.
func gangPodSpec(e *env, key, ctl string, rank int, node string) corev1.PodSpec {
	c := shell("rank", gangScript, nil)
	c.Command[2] = "C=$POD_NAME; " + strings.TrimPrefix(c.Command[2], "C=rank; ")
	c.Env = []corev1.EnvVar{{Name: "RANK", Value: strconv.Itoa(rank)},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, c), key)
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "ctl", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: ctl, Type: &dirOrCreate}}})
	spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "ctl", MountPath: "/ctl"})
	spec.NodeName = node
	return spec
}

// marks reads every events file of key: per file (pod), its marks.
func (e *env) marks(key string) map[string][]event {
	out := map[string][]event{}
	entries, _ := os.ReadDir(e.eventsDir(key))
	for _, en := range entries {
		out[en.Name()] = e.events(key, en.Name())
	}
	return out
}

// gangSample is one restart of a group: from the failing exit to the last
// rank's start after it.
type gangSample struct {
	latency time.Duration
	writes  int64 // the agents' writes but Events
	events  int64 // their Event creates and patches
}

// TestGangBenchmark measures group restarts on two real kubelets (make
// gang): for each size of GANG_SIZES (pods spread over the two nodes),
// GANG_RUNS restarts of a supervised group (RestartGroup, a node agent per
// node) and of a JobSet of the same pods recreated by its failurePolicy,
// each from rank 0's exit 42 to the last rank's first mark after it, and
// the node agents' API writes per group restart. It writes
// docs/gang-<release>.md.
func TestGangBenchmark(t *testing.T) {
	repo, binDir := prepareNode(t)
	jsDir := jobSetDir(t, repo)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, SupervisorImage: true, SecondNode: true,
		ControllerManager: true, GarbageCollector: true, JobSetDir: jsDir, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	installGroupCRD(ctx, t, c, binDir, repo)
	var writes, eventWrites atomic.Int64
	cfg := rest.CopyConfig(c.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return apiWrites{rt, &writes, &eventWrites} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{cluster.NodeName: c.KubeletRoot(), cluster.SecondNodeName: c.Second.KubeletRoot}
	for node, root := range roots {
		startE2EGroupAgent(ctx, t, client, dyn, node, filepath.Join(root, "pods"), slog.LevelWarn)
	}
	e := &env{mode: supervised, c: c, ns: "default"}
	e.superviseWithInjector()
	nodes := []string{cluster.NodeName, cluster.SecondNodeName}
	runs := gangRuns()
	var rows []string
	for _, n := range gangSizes() {
		sup := gangSupervised(ctx, t, e, n, runs, nodes, &writes, &eventWrites)
		js := gangJobSet(ctx, t, e, n, runs, nodes)
		rows = append(rows, gangRow(n, "RestartGroup (in place, node agents)", sup, true),
			gangRow(n, "JobSet failurePolicy (pods recreated)", js, false))
	}
	report := fmt.Sprintf(`# Group restarts on two kubelets, Kubernetes %s

Written by `+"`make gang`"+` (test/e2e TestGangBenchmark) at %s on this project's 2-core machine: two kubelets
(two containerd instances, two node names) under one API server, every group's pods spread evenly over them.
Each row is %d restarts of one group: from rank 0's exit 42 to the last rank's first mark after it (the
events files' clock, /proc/uptime, 10 ms). "RestartGroup": the pods under the supervisor, a node agent per
node (`+"`--groups`"+`, 200 ms between looks); the agents' API writes per group restart counted at their client, the
coordination (the GroupRestart object) apart from the Events (one `+"`PodRestartedInPlace`"+` and one `+"`RestartedInPlace`"+`
per pod and the requester's `+"`GroupRestartedInPlace`"+`, which an agent without `+"`--groups`"+` records too).
"JobSet": the same workload as a JobSet of two replicated jobs (one per node), without restart rules,
`+"`failurePolicy.maxRestarts`"+` %d: rank 0's exit fails its Job, and JobSet recreates every Job and pod.

| pods | how | median | worst | coordination writes per restart | Event writes per restart |
|---|---|---|---|---|---|
%s
`, c.KubeVersion, runCommit(), runs, runs+1, strings.Join(rows, "\n"))
	path := filepath.Join(repo, "docs", "gang-"+c.KubeVersion+".md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s:\n%s", path, report)
}

func gangRow(n int, how string, s []gangSample, withWrites bool) string {
	if len(s) == 0 {
		return fmt.Sprintf("| %d | %s | no sample | | | |", n, how)
	}
	lat := make([]time.Duration, len(s))
	var w, ev int64
	for i, x := range s {
		lat[i] = x.latency
		w += x.writes
		ev += x.events
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	med := lat[len(lat)/2]
	if len(lat)%2 == 0 {
		med = (lat[len(lat)/2-1] + lat[len(lat)/2]) / 2
	}
	writes, events := "—", "—"
	if withWrites {
		writes = fmt.Sprintf("%.1f", float64(w)/float64(len(s)))
		events = fmt.Sprintf("%.1f", float64(ev)/float64(len(s)))
	}
	return fmt.Sprintf("| %d | %s | %.2f s | %.2f s | %s | %s |", n, how, med.Seconds(), lat[len(lat)-1].Seconds(), writes, events)
}

// waitMarks polls until ok holds for the marks of key.
func (e *env) waitMarks(ctx context.Context, key string, timeout time.Duration, ok func(map[string][]event) bool) (map[string][]event, error) {
	deadline := time.Now().Add(timeout)
	for {
		m := e.marks(key)
		if ok(m) {
			return m, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return m, fmt.Errorf("%s: not reached within %s", key, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countKind(evs []event, kind string) (n int, last time.Duration) {
	for _, ev := range evs {
		if ev.kind == kind {
			n++
			last = ev.at
		}
	}
	return n, last
}

// gangSupervised runs n supervised pods in one group and restarts it runs
// times.
func gangSupervised(ctx context.Context, t *testing.T, e *env, n, runs int, nodes []string, writes, eventWrites *atomic.Int64) []gangSample {
	t.Helper()
	key := fmt.Sprintf("gang-sup-%d", n)
	ctl := filepath.Join(e.c.Dir, "ctl", key)
	group := fmt.Sprintf("bench-%d", n)
	rulesJSON := `{"rank": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [42]}}]}}`
	for i := 0; i < n; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", key, i), Namespace: e.ns,
			Labels:      map[string]string{contract.LabelGroup: group},
			Annotations: map[string]string{contract.AnnotationRules: rulesJSON}},
			Spec: gangPodSpec(e, key, ctl, i, nodes[i%2])}
		pod, err := e.mutatePod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defer deleteByLabel(ctx, t, e, contract.LabelGroup+"="+group)
	if _, err := e.waitMarks(ctx, key, 10*time.Minute, func(m map[string][]event) bool { return len(m) == n }); err != nil {
		t.Fatalf("supervised group of %d: every rank's first start: %v", n, err)
	}
	var out []gangSample
	for k := 1; k <= runs; k++ {
		before, eventsBefore := writes.Load(), eventWrites.Load()
		if err := os.WriteFile(filepath.Join(ctl, "fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := e.waitMarks(ctx, key, 5*time.Minute, func(m map[string][]event) bool {
			for _, evs := range m {
				if starts, _ := countKind(evs, markStart); starts < k+1 {
					return false
				}
			}
			return len(m) == n
		})
		if err != nil {
			t.Errorf("supervised group of %d, restart %d: %v", n, k, err)
			return out
		}
		time.Sleep(3 * time.Second) // the agents' last reports of the round
		var exit, last time.Duration
		for _, evs := range m {
			if c, at := countKind(evs, markExit); c >= k {
				exit = at
			}
			var starts int
			for _, ev := range evs {
				if ev.kind == markStart {
					starts++
					if starts == k+1 {
						last = max(last, ev.at)
					}
				}
			}
		}
		s := gangSample{latency: last - exit, writes: writes.Load() - before, events: eventWrites.Load() - eventsBefore}
		t.Logf("supervised group of %d, restart %d: %s, %d API writes and %d Event writes", n, k, s.latency, s.writes, s.events)
		out = append(out, s)
	}
	return out
}

// gangJobSet runs the same n ranks as a JobSet and lets its failurePolicy
// recreate them runs times.
func gangJobSet(ctx context.Context, t *testing.T, e *env, n, runs int, nodes []string) []gangSample {
	t.Helper()
	key := fmt.Sprintf("gang-js-%d", n)
	ctl := filepath.Join(e.c.Dir, "ctl", key)
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	var replicated []any
	for r, node := range nodes {
		spec := gangPodSpec(e, key, ctl, -1, node)
		c := &spec.Containers[0]
		// Rank 0 is index 0 of the first replicated job; every start
		// marks the JobSet's restart attempt.
		c.Env = []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "ATTEMPT", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}},
			{Name: "INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
		}
		if r == 0 {
			c.Command[2] = strings.Replace(c.Command[2], "C=$POD_NAME; ", "C=$POD_NAME; RANK=$INDEX; ", 1)
		}
		tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodTemplateSpec{Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		replicated = append(replicated, map[string]any{
			"name": fmt.Sprintf("r%d", r), "replicas": int64(1),
			"template": map[string]any{"spec": map[string]any{
				"parallelism": int64(n / 2), "completions": int64(n / 2), "backoffLimit": int64(0),
				"completionMode": "Indexed", "template": tmpl,
			}},
		})
	}
	name := key
	js := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
		"metadata": map[string]any{"name": name, "namespace": e.ns},
		"spec": map[string]any{"failurePolicy": map[string]any{"maxRestarts": int64(runs + 1)},
			"network": map[string]any{"enableDNSHostnames": false}, "replicatedJobs": replicated},
	}}
	jobsets := dyn.Resource(jobSetResource).Namespace(e.ns)
	if _, err := jobsets.Create(ctx, js, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create JobSet: %v", err)
	}
	defer func() {
		fg := metav1.DeletePropagationForeground
		_ = jobsets.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg})
		deleteByLabel(ctx, t, e, "jobset.sigs.k8s.io/jobset-name="+name)
	}()
	started := func(attempt int) func(map[string][]event) bool {
		kind := fmt.Sprintf("%s%d", markStart, attempt)
		return func(m map[string][]event) bool {
			c := 0
			for _, evs := range m {
				if k, _ := countKind(evs, kind); k > 0 {
					c++
				}
			}
			return c >= n
		}
	}
	if _, err := e.waitMarks(ctx, key, 10*time.Minute, started(0)); err != nil {
		t.Fatalf("JobSet of %d: every rank's first start: %v", n, err)
	}
	var out []gangSample
	for k := 1; k <= runs; k++ {
		if err := os.WriteFile(filepath.Join(ctl, "fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := e.waitMarks(ctx, key, 10*time.Minute, started(k))
		if err != nil {
			t.Errorf("JobSet of %d, restart %d: %v", n, k, err)
			return out
		}
		var exit, last time.Duration
		kind := fmt.Sprintf("%s%d", markStart, k)
		for _, evs := range m {
			for _, ev := range evs {
				switch {
				case ev.kind == markExit && ev.at > exit:
					exit = ev.at
				case ev.kind == kind && ev.at > last:
					last = ev.at
				}
			}
		}
		s := gangSample{latency: last - exit}
		t.Logf("JobSet of %d, restart %d: %s", n, k, s.latency)
		out = append(out, s)
	}
	return out
}

// deleteByLabel deletes the pods of a selector at once and waits until
// they are gone, so that the next row starts on an idle node.
func deleteByLabel(ctx context.Context, t *testing.T, e *env, selector string) {
	t.Helper()
	zero := int64(0)
	pods := e.c.Client.CoreV1().Pods(e.ns)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: selector}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete %s: %v", selector, err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(l.Items) == 0 {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Errorf("pods of %s still there after 5 min", selector)
}
