package nodeagent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

var agentStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// testPod is a pod as the informer holds it, created at created.
func testPod(created time.Time, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1",
		CreationTimestamp: metav1.NewTime(created)}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

// status is a document as podstate writes it after restarts in-place
// restarts, the last one by rule 0 (exit 3) at restartAt.
func status(container string, restarts int, gen uint64, restartAt time.Time) statevol.Status {
	rule := 0
	exit := &statevol.Exit{Code: 3, Rule: &rule, Action: rules.ActionRestart, At: restartAt}
	s := statevol.Status{Container: container, State: contract.PhaseRunning, Restarts: restarts, Generation: gen,
		LastExit: exit, UpdatedAt: restartAt}
	if restarts > 0 {
		s.LastRestart = exit
	}
	return s
}

func doc(s statevol.Status) Doc { return Doc{PodUID: "uid-1", Status: s} }

func withTotal(d Doc, n int) Doc { d.RestartsTotal = &n; return d }

// scanStep is one scan of the pod: its documents, and what the diff must
// answer.
type scanStep struct {
	docs []Doc
	// events: "RestartedInPlace app x2 total 3", "PodRestartedInPlace x1 gen 1"
	events []string
	// restarts is the counter of each container after the scan.
	restarts map[string]int
}

func eventStrings(evs []event) []string {
	var out []string
	for _, e := range evs {
		if e.reason == agentapi.ReasonRestarted {
			out = append(out, fmt.Sprintf("%s %s x%d total %d", e.reason, e.container, e.times, e.restart.Total))
		} else {
			out = append(out, fmt.Sprintf("%s x%d gen %d", e.reason, e.times, e.podGen))
		}
	}
	return out
}

func TestDiffPod(t *testing.T) {
	before := agentStart.Add(-time.Hour)
	after := agentStart.Add(time.Minute)
	oldPod := testPod(before, "app", "side")
	newPod := testPod(agentStart.Add(300*time.Millisecond), "app", "side") // same second as the start: new
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		steps []scanStep
	}{{
		name: "restarts one scan apart make one Event each",
		pod:  oldPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 0, 0, before))}, restarts: map[string]int{"app": 0}},
			{docs: []Doc{doc(status("app", 1, 0, after))}, events: []string{"RestartedInPlace app x1 total 1"}, restarts: map[string]int{"app": 1}},
			{docs: []Doc{doc(status("app", 3, 0, after))}, events: []string{"RestartedInPlace app x2 total 3"}, restarts: map[string]int{"app": 3}},
			{docs: []Doc{doc(status("app", 3, 0, after))}, restarts: map[string]int{"app": 3}},
		},
	}, {
		name: "a new supervisor counts from 0: the counter goes on",
		pod:  oldPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 5, 0, before))}, restarts: map[string]int{"app": 5}},
			{docs: []Doc{doc(status("app", 1, 0, after))}, events: []string{"RestartedInPlace app x1 total 6"}, restarts: map[string]int{"app": 6}},
			{docs: []Doc{doc(status("app", 0, 0, after))}, restarts: map[string]int{"app": 6}},
			{docs: []Doc{doc(status("app", 2, 0, after))}, events: []string{"RestartedInPlace app x2 total 8"}, restarts: map[string]int{"app": 8}},
		},
	}, {
		name: "restartsTotal, when the document has it, is the count across hand-overs",
		pod:  oldPod,
		steps: []scanStep{
			// An agent that starts after 7 restarts by three supervisors
			// reads 7, not this supervisor's 1.
			{docs: []Doc{withTotal(doc(status("app", 1, 0, before)), 7)}, restarts: map[string]int{"app": 7}},
			// The next supervisor counts from 0 and carries 7 on.
			{docs: []Doc{withTotal(doc(status("app", 0, 0, after)), 7)}, restarts: map[string]int{"app": 7}},
			{docs: []Doc{withTotal(doc(status("app", 1, 0, after)), 8)}, events: []string{"RestartedInPlace app x1 total 8"}, restarts: map[string]int{"app": 8}},
			// An older supervisor without the field: rebuilt from here.
			{docs: []Doc{doc(status("app", 2, 0, after))}, events: []string{"RestartedInPlace app x1 total 9"}, restarts: map[string]int{"app": 9}},
			// A document whose total went down never takes the counter back.
			{docs: []Doc{withTotal(doc(status("app", 2, 0, after)), 4)}, restarts: map[string]int{"app": 9}},
		},
	}, {
		name: "an agent restarted: past restarts counted, only one dated after the start gets an Event",
		pod:  oldPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 4, 0, before)), doc(status("side", 2, 0, after))},
				events: []string{"RestartedInPlace side x1 total 2"}, restarts: map[string]int{"app": 4, "side": 2}},
		},
	}, {
		name: "a pod created since the agent started: every restart is new",
		pod:  newPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 2, 0, after))}, events: []string{"RestartedInPlace app x2 total 2"}, restarts: map[string]int{"app": 2}},
		},
	}, {
		name: "Events per scan are capped whatever the document claims",
		pod:  newPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 1_000_000, 0, after))}, events: []string{"RestartedInPlace app x25 total 1000000"}, restarts: map[string]int{"app": 1_000_000}},
		},
	}, {
		name: "a document naming no container of the pod is ignored, generation included",
		pod:  oldPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("side", 0, 0, before))}, restarts: map[string]int{"side": 0}},
			{docs: []Doc{doc(status("side", 0, 0, before)), doc(status("ghost", 9, 5, after))}, restarts: map[string]int{"side": 0}},
		},
	}, {
		name: "a pod restart: one PodRestartedInPlace per generation, from the baseline",
		pod:  oldPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 0, 2, before)), doc(status("side", 0, 2, before))}, restarts: map[string]int{"app": 0, "side": 0}},
			{docs: []Doc{doc(status("app", 1, 3, after)), doc(status("side", 0, 2, before))},
				events: []string{"RestartedInPlace app x1 total 1", "PodRestartedInPlace x1 gen 3"}, restarts: map[string]int{"app": 1, "side": 0}},
			{docs: []Doc{doc(status("app", 1, 3, after)), doc(status("side", 1, 3, after))},
				events: []string{"RestartedInPlace side x1 total 1"}, restarts: map[string]int{"app": 1, "side": 1}},
		},
	}, {
		name: "a new pod's generations are all new",
		pod:  newPod,
		steps: []scanStep{
			{docs: []Doc{doc(status("app", 0, 2, after))}, events: []string{"PodRestartedInPlace x2 gen 2"}, restarts: map[string]int{"app": 0}},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *podState
			for i, step := range tc.steps {
				d := diffPod(prev, podInfoOf(tc.pod, agentStart), step.docs, agentStart)
				if got, want := strings.Join(eventStrings(d.events), "; "), strings.Join(step.events, "; "); got != want {
					t.Errorf("scan %d: events %q, want %q", i, got, want)
				}
				got := map[string]int{}
				for _, s := range d.samples {
					got[s.container] = s.restarts
					if s.namespace != "default" || s.pod != "web" {
						t.Errorf("scan %d: sample labels %+v", i, s)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(step.restarts) || fmt.Sprint(d.counts) != fmt.Sprint(step.restarts) {
					t.Errorf("scan %d: restarts %v (annotation %v), want %v", i, got, d.counts, step.restarts)
				}
				prev = &d.state
			}
		})
	}
}

// TestDiffPodIsPure: diffPod leaves the previous state as it was, so a
// scan that is thrown away changes nothing.
func TestDiffPodIsPure(t *testing.T) {
	pod := podInfoOf(testPod(agentStart.Add(-time.Hour), "app"), agentStart)
	d := diffPod(nil, pod, []Doc{doc(status("app", 2, 1, agentStart))}, agentStart)
	before := fmt.Sprint(d.state)
	diffPod(&d.state, pod, []Doc{doc(status("app", 7, 4, agentStart.Add(time.Minute)))}, agentStart)
	if after := fmt.Sprint(d.state); after != before {
		t.Errorf("previous state changed from %s to %s", before, after)
	}
}

func TestDiffPodSamples(t *testing.T) {
	s := status("app", 3, 1, agentStart)
	s.State, s.NextStartAt = contract.PhaseBackingOff, agentStart.Add(10*time.Second)
	s.LastExit = &statevol.Exit{Code: 137, Signal: "SIGKILL", At: agentStart}
	d := diffPod(nil, podInfoOf(testPod(agentStart, "app"), agentStart), []Doc{doc(s)}, agentStart)
	if len(d.samples) != 1 {
		t.Fatalf("samples %+v", d.samples)
	}
	got := d.samples[0]
	if got.restarts != 3 || got.podRestarts != 1 || !got.inBackoff || got.lastExit == nil || *got.lastExit != 137 {
		t.Errorf("sample %+v", got)
	}
	if len(d.events) == 0 {
		t.Fatal("no Event")
	}
	if msg := d.events[0].restart.String(); msg != "Container app restarted in place (restart 3): exit code 3, rule 0 (Restart), back-off 10s" {
		t.Errorf("message %q", msg)
	}
}

// handedOver is a document whose last exit (code 42 at at) a limit handed
// over after restarts in-place restarts.
func handedOver(restarts int, at time.Time) Doc {
	d := doc(status("app", restarts, 0, at.Add(-time.Second)))
	d.State = contract.PhaseExited
	d.LastExit = &statevol.Exit{Code: 42, At: at}
	d.HandOver = &statevol.HandOver{Reason: "RestartBudgetExhausted", Message: "3 in-place restarts (restartBudget.maxRestarts 3)\x1b[31m"}
	return d
}

// TestDiffHandOver: a hand-over a limit caused makes one
// HandedOverToKubelet Event per exit, with the supervisor's reason and
// message (cleaned); a restarted agent reports one only when it came after
// its start.
func TestDiffHandOver(t *testing.T) {
	before := agentStart.Add(-time.Hour)
	after := agentStart.Add(time.Minute)
	pod := podInfoOf(testPod(before, "app"), agentStart)

	first := diffPod(nil, pod, []Doc{doc(status("app", 2, 0, after))}, agentStart)
	d := diffPod(&first.state, pod, []Doc{handedOver(3, after)}, agentStart)
	var got []event
	for _, e := range d.events {
		if e.reason == agentapi.ReasonHandedOver {
			got = append(got, e)
		}
	}
	if len(got) != 1 {
		t.Fatalf("events %+v, want one HandedOverToKubelet", d.events)
	}
	want := "Container app handed to the kubelet after 3 in-place restarts: RestartBudgetExhausted: 3 in-place restarts (restartBudget.maxRestarts 3)?[31m; exit code 42"
	if msg := got[0].handOver.String(); msg != want {
		t.Errorf("message %q\nwant    %q", msg, want)
	}
	if ann := got[0].handOver.Annotations()["restart-supervisor.dev/hand-over"]; !strings.Contains(ann, `"reason":"RestartBudgetExhausted"`) {
		t.Errorf("annotation %s", ann)
	}
	// The same document again: nothing new.
	again := diffPod(&d.state, pod, []Doc{handedOver(3, after)}, agentStart)
	for _, e := range again.events {
		if e.reason == agentapi.ReasonHandedOver {
			t.Errorf("the same hand-over reported twice")
		}
	}
	// A restarted agent, first sight: an old hand-over is not reported, a
	// new one is.
	if old := diffPod(nil, pod, []Doc{handedOver(3, before)}, agentStart); len(old.events) != 0 {
		t.Errorf("old hand-over reported by a restarted agent: %+v", old.events)
	}
	if fresh := diffPod(nil, pod, []Doc{handedOver(0, after)}, agentStart); len(fresh.events) != 1 || fresh.events[0].reason != agentapi.ReasonHandedOver {
		t.Errorf("new hand-over first seen: %+v", fresh.events)
	}
}

// TestDiffPodExitReasonLabel: the last exit's reason becomes a label only
// when it is one the supervisor writes (Stalled, OOMKilled); any other
// text a pod puts in its document makes no series, so a pod cannot add
// series by writing reasons.
func TestDiffPodExitReasonLabel(t *testing.T) {
	for reason, want := range map[string]string{"Stalled": "Stalled", "OOMKilled": "OOMKilled", "": "", "Stalled2": "", "x\"}\n": ""} {
		s := status("app", 1, 0, agentStart)
		s.LastExit = &statevol.Exit{Code: 124, Reason: reason, At: agentStart}
		d := diffPod(nil, podInfoOf(testPod(agentStart, "app"), agentStart), []Doc{doc(s)}, agentStart)
		if len(d.samples) != 1 || d.samples[0].lastReason != want {
			t.Errorf("reason %q: samples %+v, want label %q", reason, d.samples, want)
		}
	}
}
