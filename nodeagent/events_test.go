package nodeagent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// TestHostileDocumentMakesABoundedPlainEvent: a status document's strings
// are the pod's to write. Escape sequences, bidirectional overrides and a
// 60 KB signal name reach neither the Event nor its annotation as written.
func TestHostileDocumentMakesABoundedPlainEvent(t *testing.T) {
	rule := 0
	hostile := "\x1b]0;owned\x07\x1b[2J\r\u202egnp.exe" + strings.Repeat("A", 60<<10)
	s := statevol.Status{Container: "app", Restarts: 1,
		LastRestart: &statevol.Exit{Code: 1, Signal: hostile, Rule: &rule, Action: rules.Action(hostile), At: agentStart}}
	r := restartOf(s, 1)
	msg := r.String()
	ann := r.annotations()[contract.EventAnnotationRestart]
	for what, v := range map[string]string{"message": msg, "annotation": ann} {
		if len(v) > MaxEventMessage {
			t.Errorf("%s: %d bytes, over %d", what, len(v), MaxEventMessage)
		}
		if strings.ContainsAny(v, "\x1b\x07\r\u202e") {
			t.Errorf("%s keeps a control character: %q", what, v)
		}
	}
	if !strings.HasPrefix(msg, "Container app restarted in place (restart 1): exit code 1 (?]0;owned??[2J??gnp.exe") {
		t.Errorf("message %q", msg)
	}
	var back Restart
	if err := json.Unmarshal([]byte(ann), &back); err != nil || back.Total != 1 || back.Container != "app" {
		t.Errorf("annotation %q: %v %+v", ann, err, back)
	}
	if got := truncate("ééé", 5); got != "..." && !strings.HasSuffix(got, "...") || len(got) > 5 {
		t.Errorf("truncate cut a rune: %q", got)
	}
}

// TestRestartEventNamesAnOOMKill: an in-place restart after an
// out-of-memory kill says OOMKilled in its message and annotation, as the
// kubelet's lastState.terminated.reason does for a native restart.
func TestRestartEventNamesAnOOMKill(t *testing.T) {
	s := statevol.Status{Container: "trainer", Restarts: 2,
		LastRestart: &statevol.Exit{Code: 137, Signal: "SIGKILL", Reason: "OOMKilled", At: agentStart}}
	r := restartOf(s, 2)
	if want := "Container trainer restarted in place (restart 2): exit code 137 (SIGKILL, OOMKilled), no rule (container policy), back-off 0s"; r.String() != want {
		t.Errorf("message %q, want %q", r.String(), want)
	}
	var back Restart
	if err := json.Unmarshal([]byte(r.annotations()[contract.EventAnnotationRestart]), &back); err != nil || back.ExitReason != "OOMKilled" {
		t.Errorf("annotation: %v %+v", err, back)
	}
	s.LastRestart.Reason = ""
	if got := restartOf(s, 2).ExitText(); got != "exit code 137 (SIGKILL)" {
		t.Errorf("without a reason: %q", got)
	}
}

func agentEvent(host, controller string, r Restart) corev1.Event {
	b, _ := json.Marshal(r)
	return corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{contract.EventAnnotationRestart: string(b)}},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web",
			FieldPath: "spec.containers{" + r.Container + "}"},
		Reason: ReasonRestarted, Message: "prose that is never read",
		Source: corev1.EventSource{Component: Component, Host: host}, ReportingController: controller, ReportingInstance: host,
		LastTimestamp: metav1.NewTime(agentStart)}
}

// TestStatusTrustsOnlyTheAgentsEvents: an Event is taken only with the
// agent's source and reporting fields, from a node that runs an agent pod,
// with an annotation about the container the Event is on.
func TestStatusTrustsOnlyTheAgentsEvents(t *testing.T) {
	nodes := map[string]bool{"node-a": true}
	good := Restart{Container: "app", Total: 3}
	for _, tc := range []struct {
		name string
		e    corev1.Event
		want bool
	}{
		{"the agent's", agentEvent("node-a", Component, good), true},
		{"a node without an agent pod", agentEvent("node-z", Component, good), false},
		{"no reportingController (core/v1 by hand)", agentEvent("node-a", "", good), false},
		{"another source", func() corev1.Event {
			e := agentEvent("node-a", Component, good)
			e.Source.Component = "kubelet"
			return e
		}(), false},
		{"an instance that is not the source host", func() corev1.Event { e := agentEvent("node-a", Component, good); e.ReportingInstance = "x"; return e }(), false},
	} {
		if got := trustedEvent(tc.e, nodes); got != tc.want {
			t.Errorf("%s: trusted %v, want %v", tc.name, got, tc.want)
		}
	}

	e := agentEvent("node-a", Component, good)
	if r, ok := restartFromEvent(e); !ok || r.Total != 3 {
		t.Errorf("the agent's annotation not read: %+v %v", r, ok)
	}
	e.InvolvedObject.FieldPath = "spec.containers{side}"
	if _, ok := restartFromEvent(e); ok {
		t.Error("an annotation naming another container than the Event's was read")
	}
	e = agentEvent("node-a", Component, good)
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
		Restart: Restart{Container: "app\r", Total: 2, ExitCode: &code, Signal: "\x1b[2J", Rule: &rule, Action: "Restart\u202e"},
		Last:    agentStart}}
	var out bytes.Buffer
	if err := WriteStatus(&out, rows, true, agentStart.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.ContainsAny(s, "\x1b\x07\r\u202e") {
		t.Errorf("table keeps control characters:\n%q", s)
	}
}
