package agentstatus

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/nodeagent/agentapi"
)

// agentStart is a fixed time the Events name.
var agentStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// agentEvent is an Event as node host's agent writes it, signed by s.
func agentEvent(s *agentapi.Signer, host, controller string, r agentapi.Restart) corev1.Event {
	e := corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web", UID: "uid-web",
			FieldPath: "spec.containers{" + r.Container + "}"},
		Reason: agentapi.ReasonRestarted, Message: "prose that is never read",
		Source: corev1.EventSource{Component: agentapi.Component, Host: host}, ReportingController: controller, ReportingInstance: host,
		LastTimestamp: metav1.NewTime(agentStart)}
	e.Annotations = s.Sign(e.Reason, &e.InvolvedObject, r.Annotations())
	return e
}

// TestStatusTrustsOnlyTheAgentsEvents: an Event is taken only with the
// agent's source and reporting fields, from a node that runs an agent pod,
// signed by a key that node's agent published, with an annotation about
// the container the Event is on. Every field an Event's author could copy
// from a real one is copied in the forgeries below; what they change is
// what the signature covers.
func TestStatusTrustsOnlyTheAgentsEvents(t *testing.T) {
	nodes := map[string]bool{"node-a": true, "node-b": true}
	a, b := agentapi.NewSigner("node-a"), agentapi.NewSigner("node-b")
	old := agentapi.NewSigner("node-a") // the node's agent before a restart
	keys := map[string][]ed25519.PublicKey{
		"node-a": {agentapi.ParseKeys(a.Public())[0], agentapi.ParseKeys(old.Public())[0]},
		"node-b": {agentapi.ParseKeys(b.Public())[0]}}
	good := agentapi.Restart{Container: "app", Total: 3}
	edit := func(f func(*corev1.Event)) corev1.Event {
		e := agentEvent(a, "node-a", agentapi.Component, good)
		f(&e)
		return e
	}
	for _, tc := range []struct {
		name string
		e    corev1.Event
		want bool
	}{
		{"the agent's", agentEvent(a, "node-a", agentapi.Component, good), true},
		{"the node's agent before a restart", agentEvent(old, "node-a", agentapi.Component, good), true},
		{"its message and timestamps changed", edit(func(e *corev1.Event) {
			e.Message, e.Count, e.LastTimestamp = "(combined from similar events): x", 40, metav1.NewTime(agentStart.Add(time.Hour))
		}), true},
		{"a node without an agent pod", agentEvent(agentapi.NewSigner("node-z"), "node-z", agentapi.Component, good), false},
		{"no reportingController (core/v1 by hand)", agentEvent(a, "node-a", "", good), false},
		{"another source", edit(func(e *corev1.Event) { e.Source.Component = "kubelet" }), false},
		{"an instance that is not the source host", edit(func(e *corev1.Event) { e.ReportingInstance = "x" }), false},
		{"copied onto another pod", edit(func(e *corev1.Event) { e.InvolvedObject.Name, e.InvolvedObject.UID = "db", "uid-db" }), false},
		{"copied onto the same name's next pod", edit(func(e *corev1.Event) { e.InvolvedObject.UID = "uid-web-2" }), false},
		{"copied into another namespace", edit(func(e *corev1.Event) { e.InvolvedObject.Namespace = "prod" }), false},
		{"its count raised", edit(func(e *corev1.Event) {
			e.Annotations[contract.EventAnnotationRestart] = `{"container":"app","total":999,"backoffSeconds":0}`
		}), false},
		{"another of its annotations added", edit(func(e *corev1.Event) { e.Annotations[contract.EventAnnotationPodRestart] = "5" }), false},
		{"made a pod restart", edit(func(e *corev1.Event) { e.Reason = agentapi.ReasonPodRestarted }), false},
		{"moved to another node that runs an agent", edit(func(e *corev1.Event) { e.Source.Host, e.ReportingInstance = "node-b", "node-b" }), false},
		{"signed by another node's agent", agentEvent(b, "node-a", agentapi.Component, good), false},
		{"no signature", edit(func(e *corev1.Event) { delete(e.Annotations, contract.EventAnnotationSignature) }), false},
		{"a signature that is not base64", edit(func(e *corev1.Event) {
			e.Annotations[contract.EventAnnotationSignature] = strings.Repeat("!", 88)
		}), false},
		{"a 200 KiB annotation of the agent's prefix", edit(func(e *corev1.Event) {
			e.Annotations["restart-supervisor.dev/pad"] = strings.Repeat("A", 200<<10)
		}), false},
		{"a 1 MiB signature", edit(func(e *corev1.Event) {
			e.Annotations[contract.EventAnnotationSignature] = strings.Repeat("A", 1<<20)
		}), false},
	} {
		if got := trustedEvent(tc.e, nodes, keys); got != tc.want {
			t.Errorf("%s: trusted %v, want %v", tc.name, got, tc.want)
		}
	}
	if trustedEvent(agentEvent(a, "node-a", agentapi.Component, good), nodes, nil) {
		t.Error("an Event trusted with no key published")
	}

	e := agentEvent(a, "node-a", agentapi.Component, good)
	if r, ok := restartFromEvent(e); !ok || r.Total != 3 {
		t.Errorf("the agent's annotation not read: %+v %v", r, ok)
	}
	e.InvolvedObject.FieldPath = "spec.containers{side}"
	if _, ok := restartFromEvent(e); ok {
		t.Error("an annotation naming another container than the Event's was read")
	}
	e = agentEvent(a, "node-a", agentapi.Component, good)
	e.Annotations[contract.EventAnnotationRestart] = `{"container":"app","total":3,"x":"` + strings.Repeat("a", 8<<10) + `"}`
	if _, ok := restartFromEvent(e); ok {
		t.Error("an 8 KiB annotation was decoded")
	}
	delete(e.Annotations, contract.EventAnnotationRestart)
	if _, ok := restartFromEvent(e); ok {
		t.Error("an Event without the annotation was read from its message")
	}
}

// TestWriteStatusPrintsNoControlCharacters: a row from an Event that passed
// the checks still carries strings someone else wrote.
func TestWriteStatusPrintsNoControlCharacters(t *testing.T) {
	code := int32(1)
	rule := 0
	rows := []StatusRow{{Namespace: "default\x1b[31m", Pod: "web\x1b]0;x\x07",
		Restart: agentapi.Restart{Container: "app\r", Total: 2, ExitCode: &code, Signal: "\x1b[2J", Rule: &rule, Action: "agentapi.Restart\u202e"},
		Last:    agentStart}}
	var out bytes.Buffer
	if err := WriteStatus(&out, rows, true, agentStart.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\x1b\x07\r\u202e") {
		t.Errorf("table keeps control characters:\n%q", s)
	}
}

// TestStatusQueryList reads rows as `restart-injector status` does, from
// a clientset holding the agent's pod, its published key and its signed
// Events: a container's row is its newest Event by the agent's signed
// time (a copy of the first one dated 2099 changes nothing), a label
// selector picks the pods, and a pod recreated under its name has none of
// its predecessor's rows.
func TestStatusQueryList(t *testing.T) {
	ctx := context.Background()
	client := kubefake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: agentapi.Component + "-a", Namespace: agentapi.AgentNamespace,
			Labels: map[string]string{"app.kubernetes.io/name": agentapi.Component}}, Spec: corev1.PodSpec{NodeName: "node-a"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web", Labels: map[string]string{"app": "web"}}})
	s := agentapi.NewSigner("node-a")
	if err := agentapi.PublishKey(ctx, client, agentapi.AgentNamespace, "node-a", s.Public()); err != nil {
		t.Fatal(err)
	}
	var first corev1.Event
	for total := 1; total <= 3; total++ {
		e := agentEvent(s, "node-a", agentapi.Component, agentapi.Restart{Container: "app", Total: total})
		e.Name = fmt.Sprintf("web.%d", total)
		if total == 1 {
			first = e
		}
		if _, err := client.CoreV1().Events("default").Create(ctx, &e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	replay := first.DeepCopy()
	replay.Name = "web.replayed"
	replay.LastTimestamp = metav1.NewTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	if _, err := client.CoreV1().Events("default").Create(ctx, replay, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rows := func(sel labels.Selector) []StatusRow {
		t.Helper()
		r, _, err := (&StatusQuery{Client: client, AgentNamespace: agentapi.AgentNamespace, Namespace: "default", Selector: sel}).List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := rows(nil); len(r) != 1 || r[0].Total != 3 || r[0].UID != "uid-web" {
		t.Fatalf("rows %+v, want web/app at restart 3", r)
	}
	if r := rows(labels.SelectorFromSet(labels.Set{"app": "web"})); len(r) != 1 {
		t.Errorf("app=web: %d rows, want 1", len(r))
	}
	if r := rows(labels.SelectorFromSet(labels.Set{"app": "db"})); len(r) != 0 {
		t.Errorf("app=db: rows %+v, want none", r)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := rows(nil); len(r) != 1 {
		t.Errorf("web deleted: %d rows, want its history (1)", len(r))
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web-2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := rows(nil); len(r) != 0 {
		t.Errorf("web recreated: rows %+v, want none of its predecessor's", r)
	}
}
