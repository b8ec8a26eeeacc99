package agentapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// agentStart is a fixed time the documents name.
var agentStart = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// TestHostileDocumentMakesABoundedPlainEvent: a status document's strings
// are the pod's to write. Escape sequences, bidirectional overrides and a
// 60 KB signal name reach neither the Event nor its annotation as written.
func TestHostileDocumentMakesABoundedPlainEvent(t *testing.T) {
	rule := 0
	hostile := "\x1b]0;owned\x07\x1b[2J\r\u202egnp.exe" + strings.Repeat("A", 60<<10)
	s := statevol.Status{Container: "app", Restarts: 1,
		LastRestart: &statevol.Exit{Code: 1, Signal: hostile, Rule: &rule, Action: rules.Action(hostile), At: agentStart}}
	r := RestartOf(s, 1)
	msg := r.String()
	ann := r.Annotations()[contract.EventAnnotationRestart]
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
	if got := Truncate("ééé", 5); got != "..." && !strings.HasSuffix(got, "...") || len(got) > 5 {
		t.Errorf("truncate cut a rune: %q", got)
	}
}

// TestRestartEventNamesAnOOMKill: an in-place restart after an
// out-of-memory kill says OOMKilled in its message and annotation, as the
// kubelet's lastState.terminated.reason does for a native restart.
func TestRestartEventNamesAnOOMKill(t *testing.T) {
	s := statevol.Status{Container: "trainer", Restarts: 2,
		LastRestart: &statevol.Exit{Code: 137, Signal: "SIGKILL", Reason: "OOMKilled", At: agentStart}}
	r := RestartOf(s, 2)
	if want := "Container trainer restarted in place (restart 2): exit code 137 (SIGKILL, OOMKilled), no rule (container policy), back-off 0s"; r.String() != want {
		t.Errorf("message %q, want %q", r.String(), want)
	}
	var back Restart
	if err := json.Unmarshal([]byte(r.Annotations()[contract.EventAnnotationRestart]), &back); err != nil || back.ExitReason != "OOMKilled" {
		t.Errorf("annotation: %v %+v", err, back)
	}
	s.LastRestart.Reason = ""
	if got := RestartOf(s, 2).ExitText(); got != "exit code 137 (SIGKILL)" {
		t.Errorf("without a reason: %q", got)
	}
}
