package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// TestNextStep: the coordinator releases a round once every node it
// listed reported all its members stopped (fewer when some left, none
// when all did), and marks it done once every one reported them started
// again; a node it did not list does not hold the round.
func TestNextStep(t *testing.T) {
	expected := map[string]int{"a": 2, "b": 2}
	rep := func(node string, members, stopped, started int) agentapi.NodeReport {
		return agentapi.NodeReport{Node: node, Generation: 2, Members: members, Stopped: stopped, Started: started}
	}
	st := agentapi.GroupState{Generation: 2, Released: 1, Done: 1}
	for _, tc := range []struct {
		name    string
		st      agentapi.GroupState
		reports []agentapi.NodeReport
		want    string
	}{
		{"b has not reported", st, []agentapi.NodeReport{rep("a", 2, 2, 0)}, ""},
		{"one of b's members still runs", st, []agentapi.NodeReport{rep("a", 2, 2, 0), rep("b", 2, 1, 0)}, ""},
		{"every member stopped", st, []agentapi.NodeReport{rep("a", 2, 2, 0), rep("b", 2, 2, 0)}, "released"},
		{"one of b's left the round", st, []agentapi.NodeReport{rep("a", 2, 2, 0), rep("b", 1, 1, 0)}, "released"},
		{"all of b's left", st, []agentapi.NodeReport{rep("a", 2, 2, 0), rep("b", 0, 0, 0)}, "released"},
		{"a node not listed reports nothing yet", st, []agentapi.NodeReport{rep("a", 2, 2, 0), rep("b", 2, 2, 0), rep("c", 1, 0, 0)}, "released"},
		{"released, b starting", agentapi.GroupState{Generation: 2, Released: 2, Done: 1}, []agentapi.NodeReport{rep("a", 2, 2, 2), rep("b", 2, 2, 1)}, ""},
		{"released, all started", agentapi.GroupState{Generation: 2, Released: 2, Done: 1}, []agentapi.NodeReport{rep("a", 2, 2, 2), rep("b", 2, 2, 2)}, "done"},
		{"done", agentapi.GroupState{Generation: 2, Released: 2, Done: 2}, []agentapi.NodeReport{rep("a", 2, 2, 2), rep("b", 2, 2, 2)}, ""},
	} {
		reports := map[string]agentapi.NodeReport{}
		for _, r := range tc.reports {
			reports[r.Node] = r
		}
		if got := nextStep(tc.st, expected, reports); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReportDue: a node writes its report twice a round, once when every
// member stopped and once when every one started again, whatever the
// steps between.
func TestReportDue(t *testing.T) {
	r := &groupRound{}
	writes := 0
	for _, rep := range []agentapi.NodeReport{
		{Members: 2}, {Members: 2, Stopped: 1}, {Members: 2, Stopped: 2}, {Members: 2, Stopped: 2},
		{Members: 2, Stopped: 2, Started: 1}, {Members: 2, Stopped: 2, Started: 2}, {Members: 2, Stopped: 2, Started: 2},
	} {
		if reportDue(rep, r) {
			writes++
			r.sentStopped = r.sentStopped || rep.Stopped >= rep.Members
			r.sentStarted = r.sentStarted || rep.Started >= rep.Members
		}
	}
	if writes != 2 || !r.sentStopped || !r.sentStarted {
		t.Errorf("%d writes (stopped %v, started %v), want 2", writes, r.sentStopped, r.sentStarted)
	}
}

// A member whose own volume keeps the delivery failing (here pod-restarts/
// is a link) is tried again at every step, and said once a round in the
// agent's log, not once a step: one pod cannot flood the node's log.
func TestFailedDeliveryIsLoggedOncePerRound(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "pod-restarts")); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := newAgent(Config{NodeName: "n", Limits: DefaultLimits, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Client: kubefake.NewClientset()}, time.Now())
	key := contract.LabelGroup + "=g"
	obj := groupObject(key, map[string]any{"generation": int64(1), "cause": map[string]any{"pod": "p", "container": "c", "exitCode": int64(42)}})
	objects := storeOf(t, obj)
	g := &groups{host: a, log: a.log, client: dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme(), obj), objects: objects,
		rounds: map[string]*groupRound{}, handled: map[string]string{}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1", Labels: map[string]string{contract.LabelGroup: "g"}}}
	for i := 0; i < 10; i++ {
		g.carryOut(context.Background(), []localMember{{pod: pod, key: key, dir: dir, fd: -1}})
	}
	if n := strings.Count(logs.String(), "deliver group restart"); n != 1 {
		t.Fatalf("10 steps of a failing delivery logged %d times, want 1:\n%s", n, logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "pod-restarts", "00000000000000000001")); err == nil {
		t.Fatal("delivered through the link")
	}
}

// TestNodeReportOf: a node reports its members, those the round reached
// that have stopped, and those released that have started again.
func TestNodeReportOf(t *testing.T) {
	released := map[string]bool{"a": true}
	for _, tc := range []struct {
		name   string
		states []memberState
		want   agentapi.NodeReport
	}{
		{"none reached", []memberState{{uid: "a"}, {uid: "b"}}, agentapi.NodeReport{Generation: 3, Members: 2}},
		{"one stopped", []memberState{{uid: "a", podGen: 5, stopped: true}, {uid: "b", podGen: 4}}, agentapi.NodeReport{Generation: 3, Members: 2, Stopped: 1}},
		{"a started, released", []memberState{{uid: "a", podGen: 5, stopped: true, started: true}, {uid: "b", podGen: 4, stopped: true}},
			agentapi.NodeReport{Generation: 3, Members: 2, Stopped: 2, Started: 1}},
		{"b started, not released: not counted", []memberState{{uid: "b", podGen: 4, stopped: true, started: true}},
			agentapi.NodeReport{Generation: 3, Members: 2, Stopped: 1}},
		{"unreached but marked: not counted", []memberState{{uid: "a", stopped: true, started: true}}, agentapi.NodeReport{Generation: 3, Members: 2}},
	} {
		if got := nodeReportOf(3, 2, tc.states, released); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestPlanRelease: members are released once the coordinator released the
// round, or, past the stop wait, every member the round reached
// whether stopped or not; never a member the round has not reached, and
// never twice.
func TestPlanRelease(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	const wait = 30 * time.Second
	stopped := agentapi.GroupState{Generation: 2, Released: 2}
	running := agentapi.GroupState{Generation: 2, Released: 1}
	states := []memberState{{uid: "a", podGen: 7, stopped: true}, {uid: "b", podGen: 3, stopped: true}, {uid: "c"}}
	for _, tc := range []struct {
		name     string
		st       agentapi.GroupState
		age      time.Duration
		released map[string]bool
		want     []string
		all      bool
	}{
		{"not released yet", running, time.Second, nil, nil, false},
		{"released", stopped, time.Second, nil, []string{"a", "b"}, true},
		{"released once", stopped, time.Second, map[string]bool{"a": true}, []string{"b"}, true},
		{"late: the reached ones, stopped or not", running, wait + time.Second, nil, []string{"a", "b"}, false},
	} {
		r := &groupRound{generation: 2, delivered: now.Add(-tc.age), released: map[string]bool{}}
		for k, v := range tc.released {
			r.released[k] = v
		}
		got, all := planRelease(tc.st, r, states, now, wait)
		if !slices.Equal(got, tc.want) || all != tc.all {
			t.Errorf("%s: release %v all %v, want %v %v", tc.name, got, all, tc.want, tc.all)
		}
	}
	late := []memberState{{uid: "a", podGen: 7}}
	r := &groupRound{generation: 2, delivered: now.Add(-wait - time.Second), released: map[string]bool{}}
	if got, _ := planRelease(running, r, late, now, wait); !slices.Equal(got, []string{"a"}) {
		t.Errorf("late, a member that never stopped: release %v, want [a]", got)
	}
}

// fakeHost is a groupHost without an API server: its node's pods, the
// group's members as the API would list them, and what the loop reports.
type fakeHost struct {
	name    string
	dir     string // the kubelet's pods directory
	pods    []corev1.Pod
	events  []string
	samples []groupSample
}

func (h *fakeHost) node() string    { return h.name }
func (h *fakeHost) podsDir() string { return h.dir }
func (h *fakeHost) nodePods() []*corev1.Pod {
	var out []*corev1.Pod
	for i := range h.pods {
		out = append(out, &h.pods[i])
	}
	return out
}
func (h *fakeHost) listPods(context.Context, string, labels.Selector) ([]corev1.Pod, error) {
	return h.pods, nil
}
func (h *fakeHost) recordGroupEvent(_ *corev1.ObjectReference, msg string, _ map[string]string) {
	h.events = append(h.events, msg)
}
func (h *fakeHost) logRefused([]error)                    {}
func (h *fakeHost) setGroupSamples(samples []groupSample) { h.samples = samples }

// listedReports is a reportSource that lists the reports from a (fake)
// dynamic client, as the coordinator's watch would hold them.
type listedReports struct {
	t   *testing.T
	dyn *dynamicfake.FakeDynamicClient
}

func (l listedReports) keep(context.Context, map[string]bool) {}
func (l listedReports) list(id string) []any {
	ns, name, _ := strings.Cut(id, "/")
	list, err := l.dyn.Resource(agentapi.ReportResource).Namespace(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: agentapi.LabelReportOf + "=" + name})
	if err != nil {
		l.t.Fatal(err)
	}
	var out []any
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// TestRoundOnOneNode carries a round out on a node whose two members are
// the only ones of the group, step by step as the supervisors would move,
// with this node's agent as the round's coordinator: delivered to both,
// reported once both stopped, released by the coordinator, reported once
// both started again, and marked done: two report writes and two writes
// of the group's object.
func TestRoundOnOneNode(t *testing.T) {
	key := contract.LabelGroup + "=g"
	obj := groupObject(key, map[string]any{"generation": int64(1), "coordinator": "n1", "cause": map[string]any{"pod": "p0", "container": "rank", "exitCode": int64(42),
		"time": time.Now().UTC().Format(time.RFC3339)}})
	objects := storeOf(t, obj)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{agentapi.ReportResource: "GroupRestartReportList", agentapi.GroupResource: "GroupRestartList"}, obj)
	host := &fakeHost{name: "n1"}
	var ms []localMember
	for _, name := range []string{"p0", "p1"} {
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels: map[string]string{contract.LabelGroup: "g"}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "rank",
				Env: []corev1.EnvVar{{Name: contract.EnvConfig, Value: `{"restartPolicyRules":[{"action":"RestartGroup"}]}`}}}}}}
		host.pods = append(host.pods, pod)
		ms = append(ms, localMember{pod: &host.pods[len(host.pods)-1], key: key, dir: t.TempDir(), fd: -1})
	}
	var logs bytes.Buffer
	g := newGroups(host, slog.New(slog.NewTextHandler(&logs, nil)), dyn, nil, &coordination{reports: listedReports{t, dyn}, rounds: map[string]*coordRound{}})
	g.objects = objects
	id := "default/" + agentapi.GroupObjectName(key)
	ctx := context.Background()
	writes := func() (reports, object int) {
		for _, a := range dyn.Actions() {
			switch {
			case a.GetVerb() == "list" || a.GetVerb() == "get":
			case a.GetResource() == agentapi.ReportResource:
				reports++
			case a.GetResource() == agentapi.GroupResource:
				object++
			}
		}
		return reports, object
	}
	// step is one step of the agent on the node: its members, then its
	// coordination, then the watch bringing the object's change back.
	step := func() {
		g.carryOut(ctx, ms)
		g.coordinate(ctx, map[string]bool{id: true})
		u, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(ctx, agentapi.GroupObjectName(key), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := objects.Update(u); err != nil {
			t.Fatal(err)
		}
	}
	report := func() agentapi.NodeReport {
		u, err := dyn.Resource(agentapi.ReportResource).Namespace("default").Get(ctx, agentapi.ReportName(agentapi.GroupObjectName(key), "n1"), metav1.GetOptions{})
		if err != nil {
			return agentapi.NodeReport{}
		}
		return agentapi.ReportFromObject(u)
	}
	mark := func(m localMember, n uint64, what string) {
		if err := os.WriteFile(filepath.Join(m.dir, contract.PodRestartsDir, statevol.MarkerName(n, what, "rank")), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	step()
	var gens []uint64
	for _, m := range ms {
		n, ok := statevol.GroupRound(m.dir, 1)
		if !ok {
			t.Fatalf("%s: generation 1 not delivered", m.pod.Name)
		}
		gens = append(gens, n)
	}
	if got := report(); got != (agentapi.NodeReport{}) {
		t.Errorf("after delivery: report %+v, want none yet", got)
	}
	mark(ms[0], gens[0], statevol.MarkGrouped)
	step()
	step()
	if statevol.GroupReleased(ms[0].dir, gens[0]) {
		t.Error("p0 released while p1 still runs")
	}
	mark(ms[1], gens[1], statevol.MarkGrouped)
	step()
	if got := report(); got != (agentapi.NodeReport{Node: "n1", Generation: 1, Members: 2, Stopped: 2}) {
		t.Errorf("after both stopped: report %+v", got)
	}
	step() // the member's side of the release
	for i, m := range ms {
		if !statevol.GroupReleased(m.dir, gens[i]) {
			t.Errorf("%s not released once both stopped", m.pod.Name)
		}
	}
	if st, _ := g.objectState(id); st.Released != 1 || st.Members != 2 {
		t.Errorf("the object after the release: released %d members %d, want 1 and 2", st.Released, st.Members)
	}
	for i, m := range ms {
		mark(m, gens[i], statevol.MarkStarted)
	}
	step()
	step()
	if got := report(); got != (agentapi.NodeReport{Node: "n1", Generation: 1, Members: 2, Stopped: 2, Started: 2}) {
		t.Errorf("after both started: report %+v", got)
	}
	st, _ := g.objectState(id)
	if st.Done != 1 || !agentapi.RoundOver(st, time.Now(), GroupStopWait) {
		t.Errorf("the object after both started: done %d, want 1 (the round over)", st.Done)
	}
	if r, o := writes(); r != 2 || o != 2 {
		t.Errorf("the round wrote %d reports and the group's object %d times, want 2 and 2", r, o)
	}
	if strings.Contains(logs.String(), "not released within the bound") {
		t.Errorf("released late:\n%s", logs.String())
	}
}

// TestRequestsOnOneNode takes a member's requests as a step would: the
// first makes generation 1 of a new object, owned by the pod's controller,
// with its Event; a request named after no container of the pod's spec is
// not read; once the round is over, a request past the group's limit is
// refused in the member's volume.
func TestRequestsOnOneNode(t *testing.T) {
	key := contract.LabelGroup + "=g"
	dyn := dynamicfake.NewSimpleDynamicClient(k8sruntime.NewScheme())
	objects := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	host := &fakeHost{name: "n1"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: "default", UID: "uid-p0",
		Labels:          map[string]string{contract.LabelGroup: "g"},
		Annotations:     map[string]string{contract.AnnotationGroupMaxRestarts: "1"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: "uid-job", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "rank"}}}}
	m := localMember{pod: pod, key: key, dir: t.TempDir(), fd: -1}
	g := &groups{host: host, log: slog.New(slog.NewTextHandler(io.Discard, nil)), client: dyn, objects: objects,
		rounds: map[string]*groupRound{}, handled: map[string]string{}}
	request := func(container, id string, observed uint64) {
		if err := os.MkdirAll(filepath.Join(m.dir, contract.GroupDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.dir, contract.GroupDir, contract.GroupRequestPrefix+container),
			fmt.Appendf(nil, `{"id":%q,"exitCode":42,"observed":%d}`, id, observed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	object := func() *unstructured.Unstructured {
		u, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(context.Background(), agentapi.GroupObjectName(key), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	request("sidecar-of-nothing", "x", 0)
	g.takeRequests(context.Background(), m, map[string]bool{})
	if _, err := dyn.Resource(agentapi.GroupResource).Namespace("default").Get(context.Background(), agentapi.GroupObjectName(key), metav1.GetOptions{}); err == nil {
		t.Fatal("a request named after no container of the spec made the group's object")
	}
	request("rank", "r1", 0)
	g.takeRequests(context.Background(), m, map[string]bool{})
	u := object()
	st := agentapi.GroupFromObject(u)
	if st.Generation != 1 || st.Cause.Container != "rank" || st.MaxRestarts != 1 {
		t.Fatalf("after the first request: %+v", st)
	}
	if refs := u.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "uid-job" || refs[0].Controller != nil {
		t.Errorf("owner references %+v, want the Job, not as controller", refs)
	}
	if len(host.events) != 2 { // the pod and its Job
		t.Errorf("Events %q, want one on the pod and one on its Job", host.events)
	}

	// The round over (the watched copy says its coordinator saw every
	// node start again):
	// the next request is past the limit of 1.
	u.Object["spec"].(map[string]any)["done"] = int64(1)
	if err := objects.Add(u); err != nil {
		t.Fatal(err)
	}
	request("rank", "r2", 1)
	g.takeRequests(context.Background(), m, map[string]bool{})
	a, err := statevol.AnswerFor(m.dir, "rank")
	if err != nil || a.ID != "r2" || !strings.Contains(a.Refused, "limit") {
		t.Errorf("answer %+v (%v), want r2 refused past the limit", a, err)
	}
	if got := agentapi.GroupFromObject(object()).Generation; got != 1 {
		t.Errorf("generation %d after a refused request, want 1", got)
	}
}

// TestDecideFromStore: the watched copy settles a request that a newer
// generation answers, one made during a round, and one past the limit;
// only one that can make the next generation is left to the API server.
func TestDecideFromStore(t *testing.T) {
	key := contract.LabelGroup + "=g"
	now := time.Now().UTC().Format(time.RFC3339)
	objects := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	put := func(spec map[string]any) {
		if err := objects.Add(groupObject(key, spec)); err != nil {
			t.Fatal(err)
		}
	}
	g := &groups{objects: objects}
	id := "default/" + agentapi.GroupObjectName(key)
	if d, _ := g.decideFromStore(id, key, statevol.GroupRequest{Observed: 0}); d != storeAsk {
		t.Errorf("no object: %v, want storeAsk", d)
	}
	put(map[string]any{"generation": int64(2), "released": int64(2), "done": int64(1), "cause": map[string]any{"time": now}})
	for _, tc := range []struct {
		observed uint64
		want     storeDecision
	}{{1, storeUnderWay}, {2, storeRoundOn}} {
		if d, _ := g.decideFromStore(id, key, statevol.GroupRequest{Observed: tc.observed}); d != tc.want {
			t.Errorf("observed %d during round 2: %v, want %v", tc.observed, d, tc.want)
		}
	}
	if d, _ := g.decideFromStore(id, "other=key", statevol.GroupRequest{Observed: 2}); d != storeAsk {
		t.Errorf("another group's key: %v, want storeAsk (the API server's answer names the clash)", d)
	}
	put(map[string]any{"generation": int64(2), "maxRestarts": int64(2), "done": int64(2), "cause": map[string]any{"time": now}})
	if d, why := g.decideFromStore(id, key, statevol.GroupRequest{Observed: 2}); d != storeRefused || why == "" {
		t.Errorf("round over, limit 2 reached: %v %q, want storeRefused", d, why)
	}
	put(map[string]any{"generation": int64(2), "done": int64(2), "cause": map[string]any{"time": now}})
	if d, _ := g.decideFromStore(id, key, statevol.GroupRequest{Observed: 2}); d != storeAsk {
		t.Errorf("round over, no limit: %v, want storeAsk", d)
	}
}

// TestGroupOwner: a JobSet's pod's group object is owned by the JobSet,
// another pod's by its controller, a bare pod's by nothing.
func TestGroupOwner(t *testing.T) {
	js := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{jobSetNameLabel: "train", jobSetUIDLabel: "uid-js"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train-w-0", UID: "uid-job", Controller: ptr.To(true)}}}}
	if o := groupOwner(js); o == nil || o.Kind != "JobSet" || o.UID != "uid-js" || o.Controller != nil {
		t.Errorf("JobSet pod: %+v", o)
	}
	job := js.DeepCopy()
	job.Labels = nil
	if o := groupOwner(job); o == nil || o.Kind != "Job" || o.UID != "uid-job" || o.Controller != nil {
		t.Errorf("Job pod: %+v", o)
	}
	if o := groupOwner(&corev1.Pod{}); o != nil {
		t.Errorf("bare pod: %+v", o)
	}
}

// groupObject is the GroupRestart object of group key in namespace
// default with spec (its group set to key).
func groupObject(key string, spec map[string]any) *unstructured.Unstructured {
	spec["group"] = key
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": agentapi.GroupResource.GroupVersion().String(), "kind": agentapi.GroupKind,
		"metadata": map[string]any{"name": agentapi.GroupObjectName(key), "namespace": "default"}, "spec": spec}}
}

// storeOf is an informer's store holding objs.
func storeOf(t *testing.T, objs ...*unstructured.Unstructured) cache.Indexer {
	t.Helper()
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range objs {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// TestStepTakesARequestToItsDelivery runs whole steps of the group loop
// over a pods directory laid out as the kubelet's, with the object
// watched as the agent watches it (through a fake dynamic client): a
// member's request becomes generation 1, which the watch brings back and
// the next steps deliver to the member's volume. A pod that leaves the
// node takes its requests' record with it.
func TestStepTakesARequestToItsDelivery(t *testing.T) {
	dir := t.TempDir()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{agentapi.GroupResource: "GroupRestartList"})
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: "default", UID: "uid-p0",
		Labels: map[string]string{contract.LabelGroup: "g"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "rank",
			Env: []corev1.EnvVar{{Name: contract.EnvConfig, Value: `{"restartPolicyRules":[{"action":"RestartGroup"}]}`}}}}}}
	host := &fakeHost{name: "n1", dir: dir, pods: []corev1.Pod{pod}}
	state := filepath.Join(append([]string{dir, "uid-p0"}, statePath...)...)
	if err := os.MkdirAll(filepath.Join(state, contract.GroupDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, contract.GroupDir, contract.GroupRequestPrefix+"rank"), []byte(`{"id":"r1","exitCode":42,"observed":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	w := newGroupWatches(dyn, agentapi.GroupResource, byName, nil)
	defer w.stopAll()
	g := newGroups(host, slog.New(slog.NewTextHandler(io.Discard, nil)), dyn, w, nil)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.step(ctx)
		if _, ok := statevol.GroupRound(state, 1); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("generation 1 not delivered within 10 s of steps")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(host.samples) != 1 || host.samples[0].generation != 1 {
		t.Errorf("samples %+v, want the group at generation 1", host.samples)
	}
	if len(w.byID) != 1 {
		t.Errorf("%d watches, want the group's one", len(w.byID))
	}
	host.pods = nil // the pod left the node
	g.step(ctx)
	if len(g.handled) != 0 {
		t.Errorf("handled %v kept for a pod no longer on the node", g.handled)
	}
}

// TestJoinedAfter: a pod made in a later second than the generation's
// cause takes no part in that round; one made before, or in the same
// second (the two times are whole seconds), does; without a cause time
// every pod does.
func TestJoinedAfter(t *testing.T) {
	cause := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	st := agentapi.GroupState{Generation: 2, CauseTime: cause}
	for _, tc := range []struct {
		made time.Time
		want bool
	}{
		{cause.Add(-time.Hour), false},
		{cause, false},
		{cause.Add(time.Second), true},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(tc.made)}}
		if got := joinedAfter(pod, st); got != tc.want {
			t.Errorf("made %s after the cause: %v, want %v", tc.made.Sub(cause), got, tc.want)
		}
	}
	if joinedAfter(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(cause)}}, agentapi.GroupState{Generation: 1}) {
		t.Error("no cause time: every pod takes part")
	}
}

// TestTroubledRoundReadsTheObject: once a write of the round failed (the
// API server gone), the agent does not wait for its watch of the object,
// which client-go may bring back seconds late: it reads the object itself
// and releases its members on the release it finds there, though its
// watched copy still says the round is not released.
func TestTroubledRoundReadsTheObject(t *testing.T) {
	key := contract.LabelGroup + "=g"
	now := time.Now().UTC().Format(time.RFC3339)
	watched := groupObject(key, map[string]any{"generation": int64(1), "coordinator": "n2", "cause": map[string]any{"time": now}})
	current := groupObject(key, map[string]any{"generation": int64(1), "coordinator": "n2", "released": int64(1), "cause": map[string]any{"time": now}})
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{agentapi.ReportResource: "GroupRestartReportList", agentapi.GroupResource: "GroupRestartList"}, current)
	refused := true
	dyn.PrependReactor("create", "grouprestartreports", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if refused {
			return true, nil, fmt.Errorf("dial tcp 127.0.0.1:6443: connect: connection refused")
		}
		return false, nil, nil
	})
	host := &fakeHost{name: "n1"}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: "default", UID: "uid-p0", Labels: map[string]string{contract.LabelGroup: "g"}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	host.pods = []corev1.Pod{pod}
	m := localMember{pod: &host.pods[0], key: key, dir: t.TempDir(), fd: -1}
	g := newGroups(host, slog.New(slog.NewTextHandler(io.Discard, nil)), dyn, nil, nil)
	g.objects = storeOf(t, watched)
	ctx := context.Background()
	g.carryOut(ctx, []localMember{m})
	n, ok := statevol.GroupRound(m.dir, 1)
	if !ok {
		t.Fatal("generation 1 not delivered")
	}
	if err := os.WriteFile(filepath.Join(m.dir, contract.PodRestartsDir, statevol.MarkerName(n, statevol.MarkGrouped, "rank")), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	g.carryOut(ctx, []localMember{m}) // the report is refused: the round is troubled
	if !statevol.GroupReleased(m.dir, n) {
		t.Fatal("not released, though the object says released: the agent waited for its watch")
	}
	gets := 0
	for _, a := range dyn.Actions() {
		if a.GetVerb() == "get" && a.GetResource() == agentapi.GroupResource {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d reads of the object, want 1", gets)
	}
}
