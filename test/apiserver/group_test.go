package apiserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// jobUID is the UID of the Job rank 0 names as its controller.
const jobUID = "6d1f0a52-5b1c-4a53-9d0e-000000000001"

// groupConfig is the supervisor config of every member: exit 42 restarts
// the whole group in place.
const groupConfig = `{"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"RestartGroup","exitCodes":{"operator":"In","values":[42]}}]}`

// startGroupAgent runs a node agent with group restarts for node, whose
// kubelet pods directory is podsDir.
func startGroupAgent(t *testing.T, cfg *rest.Config, node, podsDir string) (metrics string) {
	t.Helper()
	metrics, _ = startStoppableGroupAgent(t, cfg, node, podsDir)
	return metrics
}

// startStoppableGroupAgent is startGroupAgent that also returns a stop
// function, which waits until the agent has ended.
func startStoppableGroupAgent(t *testing.T, cfg *rest.Config, node, podsDir string) (metrics string, stop func()) {
	t.Helper()
	return startGroupAgentEvery(t, cfg, node, podsDir, 500*time.Millisecond, 50*time.Millisecond)
}

// startGroupAgentEvery is startStoppableGroupAgent at the given scan and
// group intervals (0: the agent's defaults, as the binary runs it).
func startGroupAgentEvery(t *testing.T, cfg *rest.Config, node, podsDir string, interval, groupInterval time.Duration) (metrics string, stop func()) {
	t.Helper()
	// The agent's own bounds on its calls, as the binary sets them, not
	// the test server's generous ones: a loop that calls too much shows.
	cfg = rest.CopyConfig(nodeagent.ClientConfig(cfg))
	// A connection of its own, as each node's agent has: client-go shares
	// one transport, one HTTP/2 connection, among configs it can cache,
	// and the scale harness's hundreds of agents in this process would
	// queue behind each other's watches on it (kube-apiserver allows 100
	// streams a connection when --http2-max-streams-per-connection is 0:
	// k8s.io/apiserver v0.34.4, pkg/server/secure_serving.go).
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	hc, err := rest.HTTPClientFor(cfg)
	must(t, err)
	client, err := kubernetes.NewForConfigAndClient(cfg, hc)
	must(t, err)
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan net.Addr, 1), make(chan error, 1)
	go func() {
		done <- nodeagent.Run(ctx, nodeagent.Config{Client: client, Dynamic: dyn, Groups: true, NodeName: node, PodsDir: podsDir,
			Interval: interval, GroupInterval: groupInterval, MetricsListen: "127.0.0.1:0",
			Ready: func(addr net.Addr) { ready <- addr }})
	}()
	select {
	case addr := <-ready:
		metrics = addr.String()
	case err := <-done:
		t.Fatalf("agent %s: %v", node, err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatalf("agent %s not ready", node)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return metrics, stop
}

// groupPod creates a member pod on node (no kubelet runs it: the test runs
// its supervisor), labelled into group.
func groupPod(t *testing.T, client kubernetes.Interface, ns, name, node, group, limit string, edit ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ann := map[string]string{}
	if limit != "" {
		ann[contract.AnnotationGroupMaxRestarts] = limit
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{contract.LabelGroup: group}, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "rank", Image: "busybox", Env: []corev1.EnvVar{{Name: contract.EnvConfig, Value: groupConfig}}}}}}
	for _, e := range edit {
		e(p)
	}
	p, err := client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	must(t, err)
	return p
}

// startMember starts the real supervisor binary on script with the
// member's state volume, and stops it when the test ends whatever happened:
// SIGTERM (it stops its workload), SIGKILL after 10 s, and a failure, not a
// hang, if it still has not ended 10 s later. Wait gives up on the output
// pipe 5 s after the supervisor's exit, so a workload left behind cannot
// hold the test.
func startMember(t *testing.T, bin, state, script string, out io.Writer) (*exec.Cmd, <-chan error) {
	t.Helper()
	return startMemberWith(t, bin, state, script, groupConfig, out)
}

// startMemberWith is startMember with the supervisor's config cfg.
func startMemberWith(t *testing.T, bin, state, script, cfg string, out io.Writer) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(bin, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(), contract.EnvStateDir+"="+state, contract.EnvContainerName+"=rank", contract.EnvConfig+"="+cfg)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	must(t, cmd.Start())
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(exited)
		done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
			return
		default:
		}
		pid := cmd.Process.Pid
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-exited:
			return
		case <-time.After(10 * time.Second):
		}
		t.Errorf("supervisor pid %d did not stop within 10 s of SIGTERM; killing it", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("supervisor pid %d: still waited for 10 s after SIGKILL; giving up on it", pid)
		}
	})
	return cmd, done
}

// rankRun is one run of a member's workload, from its log.
type rankRun struct{ start, end time.Time }

// roundSpan is, over the members' runs of one group restart (each its
// first run and the one after it), the last end of a first run and the
// first and last start of a second: the barrier holds when firstStart is
// after lastEnd.
func roundSpan(members [][]rankRun) (lastEnd, firstStart, lastStart time.Time) {
	for _, r := range members {
		if r[0].end.After(lastEnd) {
			lastEnd = r[0].end
		}
		if firstStart.IsZero() || r[1].start.Before(firstStart) {
			firstStart = r[1].start
		}
		if r[1].start.After(lastStart) {
			lastStart = r[1].start
		}
	}
	return lastEnd, firstStart, lastStart
}

// readRuns parses a workload log of "start NS" and "end NS" lines.
func readRuns(t *testing.T, path string) []rankRun {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var runs []rankRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		what, ns, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, n)
		switch what {
		case "start":
			runs = append(runs, rankRun{start: at})
		case "end":
			if len(runs) > 0 {
				runs[len(runs)-1].end = at
			}
		}
	}
	return runs
}

// TestGroupRestartAcrossNodes runs four members of one group, two on each
// of two nodes, each under the real supervisor binary with its own state
// volume, and one node agent per node against a real API server: the
// first rank's exit 42 restarts every rank once, in place, none started
// before all stopped; its second exit 42 is past the group's limit
// (group-max-restarts 1): the agent refuses and the supervisor hands the
// exit over. A pod of another namespace with the same group label asks
// for a group restart too: only its own namespace's group moves.
func TestGroupRestartAcrossNodes(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	nodes := []string{"node-a", "node-b"}
	podsDirs := map[string]string{}
	for _, n := range nodes {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
	}
	const group = "train"
	type member struct {
		pod   *corev1.Pod
		state string
		log   string
		cmd   *exec.Cmd
		done  <-chan error
	}
	var members []*member
	for i := 0; i < 4; i++ {
		node := nodes[i%2]
		// Rank 0 has a controller (no controller manager runs here to
		// mind that the Job is not there): the group restart's Event goes
		// on it too.
		p := groupPod(t, client, "default", fmt.Sprintf("rank-%d", i), node, group, "1", func(p *corev1.Pod) {
			if i == 0 {
				yes := true
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: jobUID, Controller: &yes}}
			}
		})
		members = append(members, &member{pod: p, state: stateDir(t, podsDirs[node], p.UID), log: filepath.Join(dir, p.Name+".log")})
	}
	metrics := map[string]string{}
	for _, n := range nodes {
		metrics[n] = startGroupAgent(t, env.Config, n, podsDirs[n])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i, m := range members {
		// Each run logs its start and end; rank 0 exits 42 one second
		// into each run, the others run until stopped.
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
if [ %[2]d = 0 ]; then sleep 1; echo "end $(date +%%s%%N)" >> %[1]s; exit 42; fi
while :; do sleep 0.1; done`, m.log, i)
		out := &testutil.SyncBuffer{}
		var done <-chan error
		m.cmd, done = startMember(t, bin, m.state, script, out)
		m.done = done
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s supervisor:\n%s", m.pod.Name, tail(out.String(), 30))
			}
		})
	}

	// Rank 0: group restart, then the refusal, then the hand-over.
	select {
	case err := <-members[0].done:
		var ee *exec.ExitError
		if err == nil || !asExit(err, &ee) || ee.ExitCode() != 42 {
			t.Fatalf("rank-0's supervisor: %v, want exit 42 (handed over past the group's limit)", err)
		}
	case <-ctx.Done():
		t.Fatal("rank-0's supervisor did not hand its second exit over")
	}
	runs := map[string][]rankRun{}
	for _, m := range members {
		runs[m.pod.Name] = readRuns(t, m.log)
	}
	// Every rank has run twice, and no second run started before every
	// first run had ended.
	waitFor(t, "every rank's second run", 30*time.Second, func(context.Context) (bool, error) {
		for _, m := range members {
			runs[m.pod.Name] = readRuns(t, m.log)
			if len(runs[m.pod.Name]) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	var memberRuns [][]rankRun
	for _, m := range members {
		r := runs[m.pod.Name]
		if len(r) != 2 {
			t.Errorf("%s ran %d times, want 2: %+v", m.pod.Name, len(r), r)
			continue
		}
		if r[0].end.IsZero() {
			t.Errorf("%s: its first run has no end", m.pod.Name)
		}
		memberRuns = append(memberRuns, r)
	}
	lastEnd, firstRestart, lastRestart := roundSpan(memberRuns)
	if !firstRestart.After(lastEnd) {
		t.Errorf("a rank started again (%s) before every rank had stopped (%s)", firstRestart.Format(time.StampMicro), lastEnd.Format(time.StampMicro))
	}
	t.Logf("rank-0 exit → last rank restarted: %s; last stop → first restart: %s; restarts spread over %s",
		lastRestart.Sub(runs["rank-0"][0].end).Round(time.Millisecond), firstRestart.Sub(lastEnd).Round(time.Millisecond),
		lastRestart.Sub(firstRestart).Round(time.Millisecond))

	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	name := agentapi.GroupObjectName(contract.LabelGroup + "=" + group)
	obj, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	if gen, _, _ := unstructuredInt(obj.Object, "spec", "generation"); gen != 1 {
		t.Errorf("group generation %d, want 1 (the second exit was past the limit)", gen)
	}
	for _, m := range members {
		if n, ok := statevol.GroupRound(m.state, 1); !ok {
			t.Errorf("%s: group generation 1 not delivered", m.pod.Name)
		} else {
			t.Logf("%s: group generation 1 is its pod generation %d", m.pod.Name, n)
		}
	}
	waitEvents(t, client, members[0].pod, agentapi.ReasonGroupRestarted, 1)
	waitEvents(t, client, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: jobUID}}, agentapi.ReasonGroupRestarted, 1)
	// Both nodes have members: both agents serve the group's count.
	for _, n := range nodes {
		waitMetric(t, metrics[n], series("restart_supervisor_group_restarts_total", "group", contract.LabelGroup+"="+group, "namespace", "default"), "1")
	}

	// Another namespace, same label: a request from a pod there makes its
	// own group's generation and restarts nothing here.
	_, err = client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{})
	must(t, err)
	intruder := groupPod(t, client, "other", "intruder", "node-a", group, "1")
	istate := stateDir(t, podsDirs["node-a"], intruder.UID)
	must(t, os.MkdirAll(filepath.Join(istate, contract.GroupDir), 0o777))
	must(t, os.WriteFile(filepath.Join(istate, contract.GroupDir, contract.GroupRequestPrefix+"rank"),
		[]byte(`{"id":"x","container":"rank","exitCode":42,"observed":0}`), 0o644))
	waitFor(t, "the other namespace's group", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("other").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gen, _, _ := unstructuredInt(o.Object, "spec", "generation")
		return gen == 1, nil
	})
	time.Sleep(time.Second)
	for _, m := range members[1:] {
		if r := readRuns(t, m.log); len(r) != 2 {
			t.Errorf("%s ran %d times after a request in another namespace, want 2", m.pod.Name, len(r))
		}
	}
	obj, err = dyn.Resource(agentapi.GroupResource).Namespace("default").Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	if gen, _, _ := unstructuredInt(obj.Object, "spec", "generation"); gen != 1 {
		t.Errorf("default's group generation %d after a request in another namespace, want 1", gen)
	}
	// restart-injector status shows each namespace's group after the
	// container rows: its restarts, limit, last cause and finished round;
	// for a pod, its own group only.
	admin := kubeconfigFor(t, env, dir, "admin", envtest.User{Name: "group-admin", Groups: []string{"system:masters"}})
	injector := buildInjector(t, dir)
	status := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(injector, append([]string{"status", "--kubeconfig=" + admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("status %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	groupLine := func(out, ns string) []string {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) > 1 && (f[0] == contract.LabelGroup+"="+group || ns != "" && f[0] == ns && f[1] == contract.LabelGroup+"="+group) {
				return f
			}
		}
		t.Fatalf("no line of group %s in:\n%s", group, out)
		return nil
	}
	out := status("-n", "default")
	if f := groupLine(out, ""); len(f) < 7 || f[1] != "1" || f[2] != "1" || f[3] != members[0].pod.Name+"/rank" || f[5] != "42" || f[len(f)-1] != "done" {
		t.Errorf("status -n default: group line %q; want 1 restart, limit 1, cause %s/rank exit 42, round done", f, members[0].pod.Name)
	}
	all := status("-A")
	// The intruder has no supervisor: its round stays at its stop.
	if f := groupLine(all, "other"); len(f) < 8 || f[2] != "1" || f[3] != "1" || f[4] != "intruder/rank" || f[len(f)-1] != "stopping" {
		t.Errorf("status -A: other's group line %q; want 1 restart, limit 1, cause intruder/rank, round stopping (no node reported)", f)
	}
	if !strings.Contains(status("-n", "default", members[1].pod.Name), contract.LabelGroup+"="+group) {
		t.Errorf("status of member %s lacks its group's line", members[1].pod.Name)
	}
	if strings.Contains(status("-n", "other", "no-such-pod"), contract.LabelGroup) {
		t.Errorf("status of a pod that does not exist shows a group")
	}

	var names []string
	for _, m := range members[1:] {
		must(t, m.cmd.Process.Signal(syscall.SIGTERM))
		names = append(names, m.pod.Name)
		<-m.done
	}
	sort.Strings(names)
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[p]
	}
	switch n := cur.(type) {
	case int64:
		return n, true, nil
	case float64:
		return int64(n), true, nil
	}
	return 0, false, nil
}

// A group round goes on across a restart of a node agent (the new agent
// finds the delivery in the pods' files and reports and releases as the
// old one would have), and waits for a member that has not stopped until
// that member's pod is deleted (KEP-4438: a pod being deleted takes no
// pod-wide restart), then releases the others. GroupStopWait is set far
// beyond the test, so that only this handling can end the round.
func TestGroupRoundSurvivesAgentRestartAndDeletion(t *testing.T) {
	old := nodeagent.GroupStopWait
	nodeagent.GroupStopWait = 10 * time.Minute
	t.Cleanup(func() { nodeagent.GroupStopWait = old })
	env, client, dir, bin := startGroupTest(t)
	podsDirs := map[string]string{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		podsDirs[n] = filepath.Join(dir, n, "pods")
		must(t, os.MkdirAll(podsDirs[n], 0o750))
	}
	// m-3 is alone on node-c: once it is deleted, that node has no member
	// left, and its agent must say so for the round to go on.
	nodes := []string{"node-a", "node-a", "node-b", "node-c"}
	var pods []*corev1.Pod
	var states, logs []string
	for i, n := range nodes {
		p := groupPod(t, client, "default", fmt.Sprintf("m-%d", i), n, "g", "")
		pods = append(pods, p)
		states = append(states, stateDir(t, podsDirs[n], p.UID))
		logs = append(logs, filepath.Join(dir, p.Name+".log"))
	}
	startGroupAgent(t, env.Config, "node-a", podsDirs["node-a"])
	startGroupAgent(t, env.Config, "node-c", podsDirs["node-c"])
	_, stopB := startStoppableGroupAgent(t, env.Config, "node-b", podsDirs["node-b"])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Members 0-2 run under the real supervisor; member 3's pod has a
	// state volume but no supervisor: it never stops for the round.
	for i := 0; i < 3; i++ {
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
if [ %[2]d = 0 ] && [ ! -e %[1]s.failed ]; then touch %[1]s.failed; sleep 1; echo "end $(date +%%s%%N)" >> %[1]s; exit 42; fi
while :; do sleep 0.1; done`, logs[i], i)
		startMember(t, bin, states[i], script, io.Discard)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	name := agentapi.GroupObjectName(contract.LabelGroup + "=g")
	waitFor(t, "the group's generation 1", 30*time.Second, func(ctx context.Context) (bool, error) {
		o, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		gen, _, _ := unstructuredInt(o.Object, "spec", "generation")
		return gen == 1, nil
	})
	// Node B's agent goes away mid-round and a new one takes over.
	stopB()
	time.Sleep(time.Second)
	startGroupAgent(t, env.Config, "node-b", podsDirs["node-b"])
	time.Sleep(3 * time.Second)
	for i := 0; i < 3; i++ {
		if r := readRuns(t, logs[i]); len(r) != 1 {
			t.Fatalf("m-%d ran %d times while member m-3 had not stopped; want 1 (the barrier holds)", i, len(r))
		}
	}
	if _, ok := statevol.GroupRound(states[3], 1); !ok {
		t.Fatal("m-3 never got generation 1")
	}
	// Deleting m-3 (no kubelet finishes it: it stays with its deletion
	// timestamp) takes it out of the round.
	must(t, client.CoreV1().Pods("default").Delete(ctx, pods[3].Name, metav1.DeleteOptions{}))
	waitFor(t, "the others' restart once m-3 is being deleted", 60*time.Second, func(context.Context) (bool, error) {
		for i := 0; i < 3; i++ {
			if len(readRuns(t, logs[i])) < 2 {
				return false, nil
			}
		}
		return true, nil
	})
	var lastEnd, firstRestart time.Time
	for i := 0; i < 3; i++ {
		r := readRuns(t, logs[i])
		if len(r) != 2 {
			t.Errorf("m-%d ran %d times, want 2", i, len(r))
			continue
		}
		if r[0].end.After(lastEnd) {
			lastEnd = r[0].end
		}
		if firstRestart.IsZero() || r[1].start.Before(firstRestart) {
			firstRestart = r[1].start
		}
	}
	if !firstRestart.After(lastEnd) {
		t.Errorf("a member started again before every member had stopped")
	}
}

// startGroupTest starts a real API server with the GroupRestart CRD
// installed and builds the supervisor binary into the test's directory,
// which it returns beside the binary's path.
func startGroupTest(t *testing.T) (env *envtest.Environment, client kubernetes.Interface, dir, bin string) {
	t.Helper()
	env, client = startAPIServer(t, kubeAssets(t), true)
	crd := filepath.Join(repoRoot(t), "deploy", "components", "node-agent-groups", "crd.yaml")
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{crd}}); err != nil {
		t.Fatalf("install the GroupRestart CRD: %v", err)
	}
	dir = t.TempDir()
	bin = filepath.Join(dir, "restart-supervisor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-supervisor")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return env, client, dir, bin
}

// A member that floods its node agent with requests (a co-container
// writing a fresh request every 10 ms, each naming the group's current
// generation) makes at most one generation per round: every generation
// restarts every member exactly once, and no round begins before the last
// one is over.
func TestGroupRequestFloodIsBounded(t *testing.T) {
	env, client, dir, bin := startGroupTest(t)
	podsDir := filepath.Join(dir, "node-a", "pods")
	must(t, os.MkdirAll(podsDir, 0o750))
	var states, logs []string
	for i := 0; i < 2; i++ {
		p := groupPod(t, client, "default", fmt.Sprintf("flood-%d", i), "node-a", "flood", "")
		states = append(states, stateDir(t, podsDir, p.UID))
		logs = append(logs, filepath.Join(dir, p.Name+".log"))
	}
	startGroupAgent(t, env.Config, "node-a", podsDir)
	for i := range states {
		script := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s
trap 'echo "end $(date +%%s%%N)" >> %[1]s; exit 0' TERM
while :; do sleep 0.1; done`, logs[i])
		startMember(t, bin, states[i], script, io.Discard)
	}
	waitFor(t, "both members' first start", 30*time.Second, func(context.Context) (bool, error) {
		return len(readRuns(t, logs[0])) == 1 && len(readRuns(t, logs[1])) == 1, nil
	})

	// The flood: 3 s of fresh requests into member 0's state volume,
	// each naming the generation the pod has last seen.
	reqDir := filepath.Join(states[0], contract.GroupDir)
	must(t, os.MkdirAll(reqDir, 0o777))
	for n, end := 0, time.Now().Add(3*time.Second); time.Now().Before(end); n++ {
		req := fmt.Sprintf(`{"id":"flood-%d","container":"rank","exitCode":42,"observed":%d}`, n, statevol.LastGroup(states[0]))
		must(t, os.WriteFile(filepath.Join(reqDir, ".tmp"), []byte(req), 0o644))
		must(t, os.Rename(filepath.Join(reqDir, ".tmp"), filepath.Join(reqDir, contract.GroupRequestPrefix+"rank")))
		time.Sleep(10 * time.Millisecond)
	}
	// The last request stays in place and may make one more generation
	// once the round it saw is over: wait for every generation's restart
	// (each member runs generation+1 times), not for a fixed time.
	dyn, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	var gen int64
	var r0, r1 []rankRun
	waitFor(t, "each generation's restart of both members", 30*time.Second, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, agentapi.GroupObjectName(contract.LabelGroup+"=flood"), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		gen, _, _ = unstructuredInt(obj.Object, "spec", "generation")
		r0, r1 = readRuns(t, logs[0]), readRuns(t, logs[1])
		if gen < 1 || int64(len(r0)) != gen+1 || int64(len(r1)) != gen+1 {
			return false, fmt.Errorf("generation %d, but the members ran %d and %d times; want %d each", gen, len(r0), len(r1), gen+1)
		}
		return true, nil
	})
	// Every generation restarted each member once; the runs of the two
	// members alternate round by round: every run k of one member starts
	// after run k-1 of the other ended.
	for k := 1; k < len(r0); k++ {
		for _, pair := range [][2][]rankRun{{r0, r1}, {r1, r0}} {
			if !pair[0][k].start.After(pair[1][k-1].end) {
				t.Errorf("run %d started before the other member's run %d ended: rounds overlapped", k, k-1)
			}
		}
	}
	t.Logf("3 s of requests every 10 ms: %d generations, each a whole round", gen)
}
