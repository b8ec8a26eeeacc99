package apiserver_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentstatus"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// agentNode is the node the agent under test runs on; pods elsewhere are
// not its business.
const agentNode = "node-a"

// eventWrites counts the agent's Event creates and patches as the API
// server receives them.
type eventWrites struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c eventWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.Contains(r.URL.Path, "/events") && (r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodPut) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

type agentRun struct {
	cancel context.CancelFunc
	done   chan error
	addr   string
}

func (a *agentRun) stop(t *testing.T) {
	a.cancel()
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("agent: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
}

// startAgent runs nodeagent.Run in this process against the real API
// server, serving metrics on loopback.
func startAgent(t *testing.T, cfg *rest.Config, podsDir string, writes *atomic.Int64) *agentRun {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return eventWrites{rt, writes} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The agent publishes its Event-signing key in its namespace at its
	// start; status takes none of its Events before. The key is there
	// when startAgent returns: one more line in the node's ConfigMap.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	keys := func(ctx context.Context) (int, error) {
		cm, err := client.CoreV1().ConfigMaps(agentapi.AgentNamespace).Get(ctx, agentapi.AgentKeyConfigMap(agentNode), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		return strings.Count(cm.Data["keys"], "\n") + 1, nil
	}
	keysBefore, err := keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	a := &agentRun{cancel: cancel, done: make(chan error, 1)}
	go func() {
		a.done <- nodeagent.Run(ctx, nodeagent.Config{Client: client, NodeName: agentNode, PodsDir: podsDir,
			Interval: 20 * time.Millisecond, MetricsListen: "127.0.0.1:0", Ready: func(addr net.Addr) { ready <- addr },
			Annotate: true, AnnotateEvery: 200 * time.Millisecond})
	}()
	select {
	case addr := <-ready:
		a.addr = addr.String()
	case err := <-a.done:
		t.Fatalf("agent: %v", err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("agent not ready")
	}
	t.Cleanup(cancel)
	waitFor(t, "the agent's Event-signing key", 30*time.Second, func(ctx context.Context) (bool, error) {
		n, err := keys(ctx)
		return err == nil && n > min(keysBefore, 7), err
	})
	return a
}

func createPod(t *testing.T, client kubernetes.Interface, name, node string, containers ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
	}
	p, err := client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// registerAgentPod creates the node agent's pod object on node (no kubelet
// runs it here): `restart-injector status` trusts only Events from a node
// that runs one.
func registerAgentPod(t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: agentapi.Component + "-" + node, Namespace: agentapi.AgentNamespace,
		Labels: map[string]string{"app.kubernetes.io/name": agentapi.Component}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "node-agent", Image: "restart-injector"}}}}
	if _, err := client.CoreV1().Pods(agentapi.AgentNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// publishAgentKey publishes an Event-signing key for node's agent, as the
// agent does at its start (the ConfigMap of agentapi.AgentKeyConfigMap).
func publishAgentKey(t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: agentapi.AgentKeyConfigMap(node), Namespace: agentapi.AgentNamespace,
		Labels: map[string]string{"app.kubernetes.io/name": contract.AgentKeyLabel}},
		Data: map[string]string{"node": node, "keys": base64.StdEncoding.EncodeToString(pub)}}
	if _, err := client.CoreV1().ConfigMaps(agentapi.AgentNamespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// stateDir is where the kubelet would put the pod's state volume.
func stateDir(t *testing.T, podsDir string, uid any) string {
	t.Helper()
	d := filepath.Join(podsDir, fmt.Sprint(uid), "volumes", "kubernetes.io~empty-dir", contract.StateVolume)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// writeStatus writes a status document with podstate's own writer, as a
// supervisor that restarted its workload restarts times would, the first of
// its container.
func writeStatus(t *testing.T, dir, container string, restarts int, gen uint64, backoff bool) {
	t.Helper()
	writeStatusTotal(t, dir, container, restarts, restarts, gen, backoff)
}

// writeStatusTotal is writeStatus for a later supervisor of the container:
// total counts the restarts of its predecessors too (restartsTotal).
func writeStatusTotal(t *testing.T, dir, container string, restarts, total int, gen uint64, backoff bool) {
	t.Helper()
	now := time.Now()
	rule := 0
	exit := &statevol.Exit{Code: 3, Rule: &rule, Action: rules.ActionRestart, At: now}
	s := statevol.Status{Container: container, State: contract.PhaseRunning, Restarts: restarts, Generation: gen,
		PodRestarts: int(gen), LastExit: exit, StartedAt: now, SupervisorPID: 1, UpdatedAt: now, RestartsTotal: total}
	if restarts > 0 {
		s.LastRestart = exit
	}
	if backoff {
		s.State, s.NextStartAt = contract.PhaseBackingOff, now.Add(10*time.Second)
	}
	if err := statevol.WriteStatus(dir, s); err != nil {
		t.Fatal(err)
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	body, err := tryScrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// tryScrape is scrape that returns the error, for a caller that tries
// again.
func tryScrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// series is the exposition line prefix of a series; labels in the order
// the client library sorts them.
func series(name string, labels ...string) string {
	var kv []string
	for i := 0; i+1 < len(labels); i += 2 {
		kv = append(kv, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(kv)
	return name + "{" + strings.Join(kv, ",") + "} "
}

func waitMetric(t *testing.T, addr, series, want string) {
	t.Helper()
	waitFor(t, series+want, 30*time.Second, func(context.Context) (bool, error) {
		body, err := tryScrape(addr)
		if err != nil {
			return false, err
		}
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, series) {
				if strings.TrimPrefix(l, series) == want {
					return true, nil
				}
				return false, fmt.Errorf("have %s", l)
			}
		}
		return false, fmt.Errorf("no series")
	})
}

// restartEvents returns the count of the agent's Events on the pod with
// reason, summed over the Event objects (the correlator patches count).
func restartEvents(t *testing.T, client kubernetes.Interface, pod *corev1.Pod, reason string) (total int32, objects int, msgs []string) {
	t.Helper()
	l, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(pod.UID) + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		total += e.Count
		msgs = append(msgs, fmt.Sprintf("%d× %s [%s]", e.Count, e.Message, e.InvolvedObject.FieldPath))
	}
	return total, len(l.Items), msgs
}

func waitEvents(t *testing.T, client kubernetes.Interface, pod *corev1.Pod, reason string, want int32) []string {
	t.Helper()
	var msgs []string
	waitFor(t, fmt.Sprintf("%d %s events", want, reason), 30*time.Second, func(context.Context) (bool, error) {
		var n int32
		n, _, msgs = restartEvents(t, client, pod, reason)
		return n == want, fmt.Errorf("have %d: %q", n, msgs)
	})
	return msgs
}

func TestNodeAgent(t *testing.T) {
	env, client := startAPIServer(t, kubeAssets(t), true)
	podsDir := t.TempDir()
	var writes atomic.Int64

	web := createPod(t, client, "web", agentNode, "app", "side")
	other := createPod(t, client, "elsewhere", "node-b", "app")
	webDir := stateDir(t, podsDir, web.UID)
	writeStatus(t, webDir, "side", 0, 0, false)
	// A document under a name that is none of the pod's containers, with
	// a pod restart generation: neither counts.
	writeStatus(t, webDir, "ghost", 9, 5, false)
	// A pod on another node whose state volume shows up here: the agent
	// does not watch it, so it makes no series and no Event.
	writeStatus(t, stateDir(t, podsDir, other.UID), "app", 7, 0, false)

	agent := startAgent(t, env.Config, podsDir, &writes)
	appSeries := series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", "web", "container", "app", "uid", string(web.UID))

	// Three in-place restarts, one scan apart: three Events, metric 3.
	for i := 1; i <= 3; i++ {
		writeStatus(t, webDir, "app", i, 0, i == 3)
		waitMetric(t, agent.addr, appSeries, fmt.Sprint(i))
	}
	msgs := waitEvents(t, client, web, agentapi.ReasonRestarted, 3)
	t.Logf("events: %q", msgs)
	if !strings.Contains(strings.Join(msgs, "\n"), "Container app restarted in place (restart 3): exit code 3, rule 0 (Restart), back-off 10s [spec.containers{app}]") {
		t.Errorf("no event for the third restart with its exit, rule and back-off: %q", msgs)
	}
	body := scrape(t, agent.addr)
	for _, want := range []string{
		series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", "web", "container", "side", "uid", string(web.UID)) + "0",
		series("restart_supervisor_container_last_exit_code", "namespace", "default", "pod", "web", "container", "app", "uid", string(web.UID)) + "3",
		series("restart_supervisor_container_in_backoff", "namespace", "default", "pod", "web", "container", "app", "uid", string(web.UID)) + "1",
		series("restart_supervisor_pod_restarts_total", "namespace", "default", "pod", "web", "uid", string(web.UID)) + "0",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `container="ghost"`) {
		t.Errorf("/metrics shows a document that names no container of the pod:\n%s", body)
	}
	if strings.Contains(body, `pod="elsewhere"`) {
		t.Errorf("/metrics shows a pod of another node:\n%s", body)
	}
	t.Logf("/metrics excerpt:\n%s", grepLines(body, "restart_supervisor_"))

	// The agent restarted: counts come from the documents, so the
	// restart made while it was down is counted; the Events already
	// recorded are not recorded again (nor is that one: the new agent
	// cannot tell whether its predecessor saw it).
	agent.stop(t)
	writeStatus(t, webDir, "app", 4, 0, false)
	// As on a node, the pod is older than the restarted agent by more than
	// the second creationTimestamp resolves (a pod created in the agent's
	// own start second counts as new: its restarts are all reported).
	time.Sleep(time.Until(web.CreationTimestamp.Add(time.Second)))
	agent = startAgent(t, env.Config, podsDir, &writes)
	waitMetric(t, agent.addr, appSeries, "4")
	writeStatus(t, webDir, "app", 5, 0, false)
	waitMetric(t, agent.addr, appSeries, "5")
	waitEvents(t, client, web, agentapi.ReasonRestarted, 4)

	// The kubelet restarted the container: a new supervisor counts from
	// 0 and carries its predecessors' 5 in restartsTotal. The counter goes
	// on from 5.
	writeStatusTotal(t, webDir, "app", 1, 6, 0, false)
	waitMetric(t, agent.addr, appSeries, "6")
	waitEvents(t, client, web, agentapi.ReasonRestarted, 5)

	// A pod-wide restart (RestartAllContainers): generation 1 in both
	// documents.
	writeStatusTotal(t, webDir, "app", 2, 7, 1, false)
	writeStatus(t, webDir, "side", 1, 1, false)
	waitMetric(t, agent.addr, series("restart_supervisor_pod_restarts_total", "namespace", "default", "pod", "web", "uid", string(web.UID)), "1")
	waitEvents(t, client, web, agentapi.ReasonPodRestarted, 1)
	waitMetric(t, agent.addr, appSeries, "7")
	// 5 Events of app before, one each of app and side now.
	waitEvents(t, client, web, agentapi.ReasonRestarted, 7)
	if n, _, msgs := restartEvents(t, client, other, agentapi.ReasonRestarted); n != 0 {
		t.Errorf("events on a pod of another node: %q", msgs)
	}

	// --annotate: the counts on the pod, for kubectl get -o custom-columns.
	waitFor(t, "the restarts annotation", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v := p.Annotations[contract.AnnotationRestarts]
		return v == `{"app":7,"side":1}`, fmt.Errorf("annotation %q", v)
	})

	// The kubectl view, from the Events alone: none before the agent's
	// pod is known (an Event names its writer nowhere the API server
	// checks), then the rows.
	if rows, err := agentstatus.ReadStatus(context.Background(), client, agentapi.AgentNamespace, "default", ""); err == nil && len(rows) != 0 {
		t.Errorf("status trusts Events from a node that runs no agent pod: %+v", rows)
	}
	registerAgentPod(t, client, agentNode)
	forgeEvents(t, client, web)
	copyAgentEvents(t, client, web, other)
	rows, err := agentstatus.ReadStatus(context.Background(), client, agentapi.AgentNamespace, "default", "")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := agentstatus.WriteStatus(&out, rows, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	t.Logf("status:\n%s", out.String())
	got := map[string]int{}
	for _, r := range rows {
		got[r.Pod+"/"+r.Container] = r.Total
		if r.Pod == "web" && r.PodRestarts != 1 {
			t.Errorf("status row %+v: pod restarts %d, want 1", r, r.PodRestarts)
		}
	}
	if got["web/app"] != 7 || got["web/side"] != 1 || len(got) != 2 {
		t.Errorf("status rows %v, want web/app 7 and web/side 1:\n%s", got, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "IN-PLACE RESTARTS") || !strings.Contains(lines[1], "app") {
		t.Errorf("status table:\n%s", out.String())
	}

	// A crash loop at back-off 0: 1000 restarts, each seen by a scan (or a
	// few by one). The Event writes stay bounded by the correlator.
	loop := createPod(t, client, "loop", agentNode, "app")
	loopDir := stateDir(t, podsDir, loop.UID)
	loopSeries := series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", "loop", "container", "app", "uid", string(loop.UID))
	writeStatus(t, loopDir, "app", 0, 0, false)
	waitMetric(t, agent.addr, loopSeries, "0")
	before := writes.Load()
	for i := 1; i <= 1000; i++ {
		writeStatus(t, loopDir, "app", i, 0, false)
		time.Sleep(time.Millisecond)
	}
	waitMetric(t, agent.addr, loopSeries, "1000")
	time.Sleep(2 * time.Second) // let the broadcaster drain
	n, objects, _ := restartEvents(t, client, loop, agentapi.ReasonRestarted)
	w := writes.Load() - before
	t.Logf("1000 in-place restarts: %d Event writes, %d Event objects, counts summing to %d", w, objects, n)
	if w == 0 || w > 100 {
		t.Errorf("1000 restarts made %d Event writes; want between 1 and 100", w)
	}
	// The correlator aggregated them ("(combined from similar events)"),
	// which drops annotations and reporting fields: every Event object
	// still carries the values of its latest message, for status.
	l, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(loop.UID) + ",reason=" + agentapi.ReasonRestarted})
	if err != nil {
		t.Fatal(err)
	}
	combined := 0
	for _, e := range l.Items {
		if strings.HasPrefix(e.Message, "(combined from similar events): ") {
			combined++
		}
		var r agentapi.Restart
		if err := json.Unmarshal([]byte(e.Annotations[contract.EventAnnotationRestart]), &r); err != nil ||
			!strings.Contains(e.Message, fmt.Sprintf("(restart %d)", r.Total)) || e.ReportingController != agentapi.Component || e.ReportingInstance != agentNode {
			t.Errorf("Event %q: annotation %q (%v), reporting %q/%q", e.Message, e.Annotations[contract.EventAnnotationRestart], err, e.ReportingController, e.ReportingInstance)
		}
	}
	// Whether the combined Event is written before the spam filter's 25
	// tokens are spent depends on how the scans fall; the combined path
	// itself is TestSinkKeepsValuesOnAggregatedEvents (nodeagent).
	t.Logf("%d of %d Event objects combined", combined, len(l.Items))

	// web recreated under its name (a new UID, no restart yet): its
	// predecessor's Events, signed for the old UID, are not its rows.
	must(t, client.CoreV1().Pods("default").Delete(context.Background(), "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	reborn := createPod(t, client, "web", agentNode, "app")
	if reborn.UID == web.UID {
		t.Fatal("the recreated pod kept its UID")
	}
	rows, err = agentstatus.ReadStatus(context.Background(), client, agentapi.AgentNamespace, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 0 {
		t.Errorf("status of the recreated web (uid %s) shows its predecessor's rows: %+v", reborn.UID, rows)
	}
	agent.stop(t)
}

// forgeEvents creates, as any holder of the edit role could, Events on
// pod that copy the agent's reason and source but not the rest: another
// node's, no reportingController, an annotation naming another container.
// None may show in status.
func forgeEvents(t *testing.T, client kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	for i, f := range []struct {
		host, controller, container, fieldPath string
	}{
		{"node-z", agentapi.Component, "app", "spec.containers{app}"},
		{agentNode, "", "app", "spec.containers{app}"},
		{agentNode, agentapi.Component, "side", "spec.containers{app}"},
	} {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("forged.%d", i), Namespace: pod.Namespace,
			Annotations: map[string]string{contract.EventAnnotationRestart: fmt.Sprintf(`{"container":%q,"total":999}`, f.container)}},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, FieldPath: f.fieldPath},
			Reason:         agentapi.ReasonRestarted, Message: "Container app restarted in place (restart 999): \x1b]0;pwned\x07",
			Source:              corev1.EventSource{Component: agentapi.Component, Host: f.host},
			ReportingController: f.controller, ReportingInstance: f.host,
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.NewTime(time.Now().Add(time.Hour)), Count: 1, Type: corev1.EventTypeWarning}
		if _, err := client.CoreV1().Events(pod.Namespace).Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// copyAgentEvents copies, as any holder of the edit role could (they can
// read every field of the agent's Events in their namespace), the newest
// RestartedInPlace Event on from's container app, signature and all: onto
// pod to, and onto from with the count raised and a later time; and
// replays the oldest one on from unchanged but for its timestamps, dated
// 2099. The signature covers the pod, the values and the agent's time:
// none may show in status.
func copyAgentEvents(t *testing.T, client kubernetes.Interface, from, to *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	l, err := client.CoreV1().Events(from.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(from.UID) + ",reason=" + agentapi.ReasonRestarted})
	if err != nil {
		t.Fatal(err)
	}
	var real, oldest *corev1.Event
	total := func(e *corev1.Event) int {
		var r agentapi.Restart
		_ = json.Unmarshal([]byte(e.Annotations[contract.EventAnnotationRestart]), &r)
		return r.Total
	}
	for i, e := range l.Items {
		if e.InvolvedObject.FieldPath == "spec.containers{app}" && e.Annotations[contract.EventAnnotationSignature] != "" {
			if real == nil || e.LastTimestamp.After(real.LastTimestamp.Time) {
				real = &l.Items[i]
			}
			if oldest == nil || total(&e) < total(oldest) {
				oldest = &l.Items[i]
			}
		}
	}
	if real == nil {
		t.Fatalf("no signed agent Event on %s/app to copy: %+v", from.Name, real)
	}
	onto := real.DeepCopy()
	onto.ObjectMeta = metav1.ObjectMeta{Name: "copied.onto", Namespace: to.Namespace, Annotations: real.Annotations}
	onto.InvolvedObject.Name, onto.InvolvedObject.UID = to.Name, to.UID
	raised := real.DeepCopy()
	raised.ObjectMeta = metav1.ObjectMeta{Name: "copied.raised", Namespace: from.Namespace, Annotations: map[string]string{}}
	for k, v := range real.Annotations {
		raised.Annotations[k] = v
	}
	raised.Annotations[contract.EventAnnotationRestart] = strings.Replace(real.Annotations[contract.EventAnnotationRestart], `"total":`, `"total":99`, 1)
	raised.LastTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
	replayed := oldest.DeepCopy()
	replayed.ObjectMeta = metav1.ObjectMeta{Name: "copied.replayed", Namespace: from.Namespace, Annotations: oldest.Annotations}
	future := metav1.NewTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	replayed.FirstTimestamp, replayed.LastTimestamp = future, future
	if total(replayed) == total(real) {
		t.Fatalf("only one signed Event on %s/app (total %d): nothing older to replay", from.Name, total(real))
	}
	for _, e := range []*corev1.Event{onto, raised, replayed} {
		if _, err := client.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) || strings.HasPrefix(l, "# TYPE "+prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNodeAgentHostileFiles: every file under a pod's state volume is the
// pod's to write. Links at any level, FIFOs, huge files and 10k files are
// refused or cut off, one error naming each, and the scan ends.
func TestNodeAgentHostileFiles(t *testing.T) {
	podsDir := t.TempDir()
	lim := nodeagent.DefaultLimits

	good := stateDir(t, podsDir, "good")
	writeStatus(t, good, "app", 2, 0, false)

	bad := stateDir(t, podsDir, "bad")
	writeStatus(t, bad, "app", 1, 0, false)
	sdir := filepath.Join(bad, contract.StatusDir)
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"restarts": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, os.Symlink(secret, filepath.Join(sdir, "link.json")))
	must(t, syscall.Mkfifo(filepath.Join(sdir, "fifo.json"), 0o644))
	big, err := os.Create(filepath.Join(sdir, "big.json"))
	must(t, err)
	must(t, big.Truncate(1<<30)) // sparse: 1 GiB that costs no disk
	big.Close()
	must(t, os.WriteFile(filepath.Join(sdir, "junk.json"), []byte("{not json"), 0o644))

	// Links above the status directory: the state volume, and a whole
	// pod's volumes directory.
	linked := filepath.Join(podsDir, "linked-volume", "volumes", "kubernetes.io~empty-dir")
	must(t, os.MkdirAll(linked, 0o755))
	must(t, os.Symlink(good, filepath.Join(linked, contract.StateVolume)))
	must(t, os.MkdirAll(filepath.Join(podsDir, "linked-volumes"), 0o755))
	must(t, os.Symlink(filepath.Join(podsDir, "good", "volumes"), filepath.Join(podsDir, "linked-volumes", "volumes")))

	// 10k documents in one pod.
	many := filepath.Join(stateDir(t, podsDir, "many"), contract.StatusDir)
	must(t, os.MkdirAll(many, 0o755))
	for i := range 10000 {
		must(t, os.WriteFile(filepath.Join(many, fmt.Sprintf("c%05d.json", i)), []byte(`{"restarts":1}`), 0o644))
	}

	type result struct {
		docs []nodeagent.Doc
		errs []error
	}
	done := make(chan result, 1)
	go func() { d, e := nodeagent.Scan(podsDir, lim); done <- result{d, e} }()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Scan did not return: it blocked on a hostile file")
	}
	perPod := map[string]int{}
	for _, d := range r.docs {
		perPod[d.PodUID]++
		if d.Restarts == 99 {
			t.Errorf("read the document behind a link: %+v", d)
		}
	}
	if perPod["good"] != 1 || perPod["bad"] != 1 {
		t.Errorf("documents per pod %v: want the good ones read", perPod)
	}
	if perPod["linked-volume"] != 0 || perPod["linked-volumes"] != 0 {
		t.Errorf("followed a link above the status directory: %v", perPod)
	}
	if perPod["many"] != lim.MaxDocsPerPod {
		t.Errorf("pod with 10k documents: %d read, want the limit %d", perPod["many"], lim.MaxDocsPerPod)
	}
	var msgs []string
	for _, e := range r.errs {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	t.Logf("errors:\n%s", all)
	for _, want := range []string{"link.json: is a symbolic link", "fifo.json: not a regular file", "big.json: 1073741824 bytes: larger than",
		"junk.json: invalid character", "linked-volume/volumes/kubernetes.io~empty-dir/" + contract.StateVolume + "/status: " + contract.StateVolume + ": not a directory",
		"linked-volumes/volumes/kubernetes.io~empty-dir/" + contract.StateVolume + "/status: volumes: not a directory",
		"many/volumes/kubernetes.io~empty-dir/" + contract.StateVolume + "/status: more than"} {
		if !strings.Contains(all, want) {
			t.Errorf("no error %q", want)
		}
	}
	if len(r.errs) > 10 {
		t.Errorf("%d errors: want one per refused file or directory", len(r.errs))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestNodeAgentRealSupervisor: the documents written by the built
// restart-supervisor itself, with its state directory where the kubelet
// would put the pod's state volume: 3 in-place restarts by rule, then a
// hand-over.
func TestNodeAgentRealSupervisor(t *testing.T) {
	env, client := startAPIServer(t, kubeAssets(t), true)
	dir := t.TempDir()
	bin := filepath.Join(dir, "restart-supervisor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/restart-supervisor")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	podsDir := filepath.Join(dir, "pods")
	pod := createPod(t, client, "trainer", agentNode, "worker")
	state := stateDir(t, podsDir, pod.UID)
	var writes atomic.Int64
	agent := startAgent(t, env.Config, podsDir, &writes)

	// Exits 3 three times (restarted in place by the rule, 1 s apart), then 0.
	runs := filepath.Join(dir, "runs")
	script := fmt.Sprintf(`echo x >> %s; [ "$(wc -l < %s)" -gt 3 ] && exit 0; exit 3`, runs, runs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--", "sh", "-c", script)
	cmd.Env = append(os.Environ(),
		contract.EnvStateDir+"="+state, contract.EnvContainerName+"=worker",
		contract.EnvConfig+`={"restartPolicy":"Never","podRestartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[3]}}],"backoff":{"initial":"1s","max":"1s"}}`)
	out, err := cmd.CombinedOutput()
	if err != nil || ctx.Err() != nil {
		t.Fatalf("restart-supervisor: %v\n%s", err, out)
	}
	waitMetric(t, agent.addr, series("restart_supervisor_container_restarts_total", "namespace", "default", "pod", "trainer", "container", "worker", "uid", string(pod.UID)), "3")
	waitMetric(t, agent.addr, series("restart_supervisor_container_last_exit_code", "namespace", "default", "pod", "trainer", "container", "worker", "uid", string(pod.UID)), "0")
	msgs := waitEvents(t, client, pod, agentapi.ReasonRestarted, 3)
	t.Logf("events: %q", msgs)
	if !strings.Contains(strings.Join(msgs, "\n"), "exit code 3, rule 0 (Restart)") {
		t.Errorf("events lack the exit and the rule: %q", msgs)
	}
	agent.stop(t)
}
