package nodeagent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// TestSinkKeepsValuesOnAggregatedEvents: client-go's correlator, past 10
// distinct messages on one object, writes a combined Event that has
// neither the annotations nor the reporting fields, and patches only its
// message after that. Each stored Event must still carry the values of the
// message it shows. The store is client-go's object tracker, which applies
// the correlator's strategic merge patches as the API server does.
func TestSinkKeepsValuesOnAggregatedEvents(t *testing.T) {
	client := fake.NewClientset()
	sink := newEventSink("node-a")
	sink.EventSink = &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: agentapi.Component, Host: "node-a"})
	a := &Agent{recorder: rec, sink: sink, signer: agentapi.NewSigner("node-a")}
	keys := map[string][]ed25519.PublicKey{"node-a": {agentapi.ParseKeys(a.signer.Public())[0]}}
	pod := testPod(agentStart, "app")
	// A second pod whose Events have the same messages: each pod's Events
	// keep their own signature.
	twin := testPod(agentStart, "app")
	twin.Name, twin.UID = "twin", "uid-twin"
	const n = 15
	for i := 1; i <= n; i++ {
		for _, p := range []*corev1.Pod{pod, twin} {
			a.record(p, event{reason: agentapi.ReasonRestarted, container: "app", times: 1, restart: agentapi.Restart{Container: "app", Total: i}})
		}
	}
	var events []corev1.Event
	waitUntil(t, func() (bool, string) {
		l, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		events = l.Items
		last := map[string]bool{}
		for _, e := range events {
			if strings.Contains(e.Message, fmt.Sprintf("(restart %d)", n)) {
				last[e.InvolvedObject.Name] = true
			}
		}
		if len(last) == 2 {
			return true, ""
		}
		return false, fmt.Sprintf("%d Events, not both pods' of restart %d", len(events), n)
	})
	combined := 0
	for _, e := range events {
		if strings.HasPrefix(e.Message, combinedPrefix) {
			combined++
		}
		var r agentapi.Restart
		if err := json.Unmarshal([]byte(e.Annotations[contract.EventAnnotationRestart]), &r); err != nil ||
			!strings.Contains(e.Message, fmt.Sprintf("(restart %d)", r.Total)) {
			t.Errorf("Event %q: annotation %q (%v)", e.Message, e.Annotations[contract.EventAnnotationRestart], err)
		}
		if e.ReportingController != agentapi.Component || e.ReportingInstance != "node-a" {
			t.Errorf("Event %q: reporting %q/%q", e.Message, e.ReportingController, e.ReportingInstance)
		}
		if !agentapi.SignedByOneOf(e, keys["node-a"]) {
			t.Errorf("Event %q on %s: its signature does not verify", e.Message, e.InvolvedObject.Name)
		}
	}
	if combined == 0 {
		t.Errorf("no combined Event among %d: the aggregation is not exercised", len(events))
	}
}

// waitUntil polls f until it holds, for at most 30 s.
func waitUntil(t *testing.T, f func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, why := f()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
