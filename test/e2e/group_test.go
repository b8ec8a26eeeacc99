package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/test/e2e/cluster"
)

// TestGroupRestartOnTwoKubelets runs a group of four pods over two real
// kubelets (two containerd instances, two node names, one API server) with
// a node agent per node: rank 0's exit 42 under RestartGroup restarts every
// container of the four pods once, in place: no pod recreated (same UIDs),
// no container restarted by a kubelet (restartCount 0), each emptyDir kept
// (a file written by the first run is there for the second), and no rank
// started again before every rank had stopped.
func TestGroupRestartOnTwoKubelets(t *testing.T) {
	repo, binDir := prepareNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, cluster.Options{BinDir: binDir, Repo: repo, SupervisorImage: true, SecondNode: true, Log: testWriter{t}})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	tearDownAtEnd(t, c)
	installGroupCRD(ctx, t, c, binDir, repo)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]string{cluster.NodeName: c.KubeletRoot(), cluster.SecondNodeName: c.Second.KubeletRoot}
	stopAgent := map[string]func(){}
	for node, root := range roots {
		stopAgent[node] = startE2EGroupAgent(ctx, t, c.Client, dyn, node, filepath.Join(root, "pods"), slog.LevelInfo)
	}

	e := &env{mode: supervised, c: c, ns: "default"}
	e.superviseWithInjector()
	rulesJSON := `{"rank": {"restartPolicy": "Never", "restartPolicyRules": [{"action": "RestartGroup", "exitCodes": {"operator": "In", "values": [42]}}]}}`
	nodes := []string{cluster.NodeName, cluster.SecondNodeName}
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("rank-%d", i)
		// Rank 0 exits 42 once, two seconds into its first run; every
		// run marks its start, a stop marks its end, and each run adds a
		// line to a file of its emptyDir.
		script := `echo run >> /data/runs; trap 'mark STOP; exit 0' TERM; mark START; `
		if i == 0 {
			script += `if [ ! -e /data/failed ]; then touch /data/failed; sleep 2; mark EXIT; exit 42; fi; `
		}
		script += `while :; do sleep 0.1; done`
		spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, shell("rank", script, nil)), "group-"+name)
		spec.NodeName = nodes[i%2]
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns,
			Labels:      map[string]string{contract.LabelGroup: "train"},
			Annotations: map[string]string{contract.AnnotationRules: rulesJSON}}, Spec: spec}
		pod, err := e.mutatePod(ctx, pod)
		if err != nil {
			t.Fatalf("inject %s: %v", name, err)
		}
		if pod, err = c.Client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	starts := func(i int) []event {
		var out []event
		for _, ev := range e.events("group-"+pods[i].Name, "rank") {
			if ev.kind == markStart {
				out = append(out, ev)
			}
		}
		return out
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		done := true
		for i := range pods {
			done = done && len(starts(i)) >= 2
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range pods {
				t.Logf("%s: events %+v", p.Name, e.events("group-"+p.Name, "rank"))
			}
			t.Fatal("not every rank ran twice within 3 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a third start would show up by now

	var lastStop, firstRestart, lastRestart, failed time.Duration
	for i, p := range pods {
		evs := e.events("group-"+p.Name, "rank")
		var n int
		for _, ev := range evs {
			switch ev.kind {
			case markStart:
				n++
				if n == 2 {
					if firstRestart == 0 || ev.at < firstRestart {
						firstRestart = ev.at
					}
					lastRestart = max(lastRestart, ev.at)
				}
			case "STOP", markExit:
				if n == 1 {
					lastStop = max(lastStop, ev.at)
				}
				if i == 0 && ev.kind == markExit {
					failed = ev.at
				}
			}
		}
		if n != 2 {
			t.Errorf("%s started %d times, want 2: %+v", p.Name, n, evs)
		}
		got, err := c.Client.CoreV1().Pods(e.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != p.UID || got.Spec.NodeName != p.Spec.NodeName {
			t.Errorf("%s: pod recreated or moved: uid %s → %s, node %s → %s", p.Name, p.UID, got.UID, p.Spec.NodeName, got.Spec.NodeName)
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.RestartCount != 0 {
				t.Errorf("%s/%s: restartCount %d: a kubelet restarted it, not the supervisor in place", p.Name, cs.Name, cs.RestartCount)
			}
		}
		root := roots[p.Spec.NodeName]
		if runs := readHostFile(filepath.Join(root, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "data", "runs")); strings.Count(runs, "run") != 2 {
			t.Errorf("%s: the emptyDir holds %q, want the lines of both runs", p.Name, runs)
		}
	}
	if firstRestart <= lastStop {
		t.Errorf("a rank started again (uptime %s) before every rank had stopped (%s)", firstRestart, lastStop)
	}
	t.Logf("two kubelets: rank 0's exit → last rank's restart %s; last stop → first restart %s; first → last restart %s (uptime clock, 10 ms)",
		(lastRestart - failed).Round(10*time.Millisecond), (firstRestart - lastStop).Round(10*time.Millisecond), (lastRestart - firstRestart).Round(10*time.Millisecond))
	obj, err := dyn.Resource(agentapi.GroupResource).Namespace(e.ns).Get(ctx, agentapi.GroupObjectName(contract.LabelGroup+"=train"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := obj.Object["spec"].(map[string]any)
	reports, err := dyn.Resource(agentapi.ReportResource).Namespace(e.ns).List(ctx, metav1.ListOptions{LabelSelector: agentapi.LabelReportOf + "=" + obj.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	var nodesSeen []string
	for i := range reports.Items {
		if rep := agentapi.ReportFromObject(&reports.Items[i]); rep.Generation == 1 && rep.Started == rep.Members {
			nodesSeen = append(nodesSeen, rep.Node)
		}
	}
	sort.Strings(nodesSeen)
	if fmt.Sprint(spec["generation"]) != "1" || fmt.Sprint(spec["released"]) != "1" || strings.Join(nodesSeen, ",") != cluster.NodeName+","+cluster.SecondNodeName {
		t.Errorf("GroupRestart spec: generation %v, released %v, nodes that reported generation 1 started %v; want 1, 1 and both nodes", spec["generation"], spec["released"], nodesSeen)
	}

	// The first node's agent, which holds two members at the barrier in
	// the second part, is replaced mid-round there.
	restartFirstAgent := func() {
		stopAgent[cluster.NodeName]()
		startE2EGroupAgent(ctx, t, c.Client, dyn, cluster.NodeName, filepath.Join(c.KubeletRoot(), "pods"), slog.LevelInfo)
	}
	groupMemberDeletedMidRound(ctx, t, e, dyn, rulesJSON, restartFirstAgent)
}

// groupMemberDeletedMidRound: a group of three pods, two on the first
// kubelet under the supervisor and one alone on the second whose container
// never starts (its image is absent), so it never stops for a round. Rank
// 0's exit 42 holds the other two stopped at the group's barrier until
// that pod is deleted (KEP-4438: a pod being deleted takes no pod-wide
// restart); its node, with no member left, says so, and the two start
// again. The first node's agent is replaced while its members wait
// (restartAgent): the new one finds the round in their files and releases
// them. GroupStopWait is far beyond the test, so only the deletion can end
// the round.
func groupMemberDeletedMidRound(ctx context.Context, t *testing.T, e *env, dyn dynamic.Interface, rulesJSON string, restartAgent func()) {
	old := nodeagent.GroupStopWait
	nodeagent.GroupStopWait = 10 * time.Minute
	defer func() { nodeagent.GroupStopWait = old }()
	c := e.c
	var pods []*corev1.Pod
	for i, node := range []string{cluster.NodeName, cluster.NodeName, cluster.SecondNodeName} {
		name := fmt.Sprintf("hold-%d", i)
		script := `trap 'mark STOP; exit 0' TERM; mark START; `
		if i == 0 {
			// The first run exits 42 once the test says so.
			script += `if [ ! -e /data/failed ]; then until [ -e /data/go ]; do sleep 0.1; done; touch /data/failed; mark EXIT; exit 42; fi; `
		}
		script += `while :; do sleep 0.1; done`
		rank := shell("rank", script, nil)
		if i == 2 {
			rank.Image = "restart-supervisor.dev/e2e/absent:1" // ErrImageNeverPull: never starts
		}
		spec := e.withVolumes(podSpec(corev1.RestartPolicyNever, 5, rank), "group-"+name)
		spec.NodeName = node
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns,
			Labels:      map[string]string{contract.LabelGroup: "hold"},
			Annotations: map[string]string{contract.AnnotationRules: rulesJSON}}, Spec: spec}
		pod, err := e.mutatePod(ctx, pod)
		if err != nil {
			t.Fatalf("inject %s: %v", name, err)
		}
		if pod, err = c.Client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	starts := func(i int) int {
		n := 0
		for _, ev := range e.events("group-"+pods[i].Name, "rank") {
			if ev.kind == markStart {
				n++
			}
		}
		return n
	}
	holdDir := filepath.Join(c.Second.KubeletRoot, "pods", string(pods[2].UID), "volumes", "kubernetes.io~empty-dir")
	waitUntil(t, "hold-0 and hold-1 running and hold-2's volumes set up", 2*time.Minute, func() bool {
		_, err := os.Stat(holdDir)
		return starts(0) == 1 && starts(1) == 1 && err == nil
	})
	time.Sleep(2 * time.Second) // the agents see hold-2 as a member
	root := filepath.Join(c.KubeletRoot(), "pods", string(pods[0].UID), "volumes", "kubernetes.io~empty-dir", "data")
	if err := os.WriteFile(filepath.Join(root, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	name := agentapi.GroupObjectName(contract.LabelGroup + "=hold")
	waitUntil(t, "both members of the first node stopped for the round", time.Minute, func() bool {
		obj, err := dyn.Resource(agentapi.ReportResource).Namespace(e.ns).Get(ctx, agentapi.ReportName(name, cluster.NodeName), metav1.GetOptions{})
		return err == nil && agentapi.ReportFromObject(obj).Stopped == 2
	})
	restartAgent()
	time.Sleep(3 * time.Second)
	if starts(0) != 1 || starts(1) != 1 {
		t.Fatalf("hold-0 and hold-1 started %d and %d times while hold-2 had not stopped, across their agent's restart; want 1 each (the barrier holds)", starts(0), starts(1))
	}
	deleted := time.Now()
	if err := c.Client.CoreV1().Pods(e.ns).Delete(ctx, pods[2].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "hold-0 and hold-1 started again once hold-2 is being deleted", time.Minute, func() bool {
		return starts(0) == 2 && starts(1) == 2
	})
	t.Logf("two kubelets: hold-2 deleted → hold-0 and hold-1 started again within %s", time.Since(deleted).Round(10*time.Millisecond))
	if obj, err := dyn.Resource(agentapi.ReportResource).Namespace(e.ns).Get(ctx, agentapi.ReportName(name, cluster.SecondNodeName), metav1.GetOptions{}); err != nil {
		t.Errorf("the second node's report: %v", err)
	} else if rep := agentapi.ReportFromObject(obj); rep.Members != 0 {
		t.Errorf("the second node's report %+v; want members 0 once hold-2 left", rep)
	}
}

// waitUntil polls cond every 100 ms until it holds, or fails the test.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// installGroupCRD applies the GroupRestart and GroupRestartReport CRDs of
// deploy/components/node-agent-groups and waits until it is served.
func installGroupCRD(ctx context.Context, t *testing.T, c *cluster.Cluster, binDir, repo string) {
	t.Helper()
	kubectl := filepath.Join(binDir, "kubectl")
	crd := filepath.Join(repo, "deploy", "components", "node-agent-groups", "crd.yaml")
	for _, args := range [][]string{{"apply", "-f", crd}, {"wait", "--for", "condition=established", "--timeout=60s",
		"crd/grouprestarts.restart-supervisor.dev", "crd/grouprestartreports.restart-supervisor.dev"}} {
		if out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// readHostFile is a node file's content, "" when it cannot be read.
func readHostFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// startE2EGroupAgent runs a node agent with group restarts for node in
// this process, on that kubelet's pods directory, through client and dyn
// (a benchmark passes clients that count its writes), logging from level
// up. stop ends it (as the test's end does, if it has not).
func startE2EGroupAgent(ctx context.Context, t *testing.T, client kubernetes.Interface, dyn dynamic.Interface, node, podsDir string, level slog.Level) (stop func()) {
	t.Helper()
	actx, cancel := context.WithCancel(ctx)
	done, ready := make(chan error, 1), make(chan struct{})
	go func() {
		done <- nodeagent.Run(actx, nodeagent.Config{Client: client, Dynamic: dyn, Groups: true, NodeName: node, PodsDir: podsDir,
			Interval: time.Second, Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level})).With("node", node),
			Ready: func(net.Addr) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("node agent %s: %v", node, err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("node agent %s not ready", node)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}
