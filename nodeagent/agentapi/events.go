// Package agentapi owns what the node agent writes to the Kubernetes API
// and what its readers rely on: the Events' reasons, messages and
// structured annotations (events.go), their signatures and the published
// keys that verify them (signing.go), and the GroupRestart object of a
// group restart, its name, resource and schema (group.go). The daemon
// (package nodeagent) writes them; `restart-injector status` (package
// agentstatus) reads them; neither reaches into the other.
package agentapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// Event reasons the agent records, and `restart-injector status` reads.
const (
	ReasonRestarted    = "RestartedInPlace"
	ReasonPodRestarted = "PodRestartedInPlace"
	// ReasonHandedOver: a limit of the config (restartBudget,
	// handOverExitCodes, preRestartCheck, progress) handed an exit the
	// rules would restart in place to the kubelet.
	ReasonHandedOver = "HandedOverToKubelet"
	// Component is the Events' source.component and reportingController.
	Component = "restart-supervisor-node-agent"
)

// Bounds on what a status document can put into an Event. The document is
// the pod's to write: every string of it that reaches an Event is cut to
// maxFieldLen and stripped of control and format characters (so no escape
// sequence reaches `kubectl describe` or the terminal of `restart-injector
// status`), and a message is at most MaxEventMessage bytes.
const (
	MaxEventMessage = 1024
	maxFieldLen     = 64
)

// Restart is what one RestartedInPlace Event says: its message in prose
// (String) and, for `restart-injector status`, the same values structured
// in the Event's annotation contract.EventAnnotationRestart.
type Restart struct {
	Container string `json:"container"`
	// Total is the container's in-place restarts so far.
	Total int `json:"total"`
	// ExitCode is the exit that caused the restart (128+N for signal N);
	// nil when the document names none.
	ExitCode *int32 `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// ExitReason is the exit's own reason where the supervisor could tell
	// it (OOMKilled), as the kubelet gives it in lastState.terminated.
	ExitReason string `json:"exitReason,omitempty"`
	// Rule is the index of the rule that matched; nil for the container
	// policy.
	Rule   *int   `json:"rule,omitempty"`
	Action string `json:"action,omitempty"`
	// BackoffSeconds is the wait before the next start.
	BackoffSeconds int64 `json:"backoffSeconds"`
}

// RestartOf describes the restart s reports, its strings cleaned.
func RestartOf(s statevol.Status, total int) Restart {
	r := Restart{Container: Clean(s.Container), Total: total}
	if e := s.LastRestart; e != nil {
		code := e.Code
		r.ExitCode = &code
		r.Signal = Clean(e.Signal)
		r.ExitReason = Clean(e.Reason)
		if e.Rule != nil {
			rule := *e.Rule
			r.Rule = &rule
			r.Action = Clean(string(e.Action))
		}
	}
	if !s.NextStartAt.IsZero() && s.State == contract.PhaseBackingOff {
		r.BackoffSeconds = int64(max(0, s.NextStartAt.Sub(s.UpdatedAt)).Round(time.Second) / time.Second)
	}
	return r
}

// ExitText is "exit code 1", "exit code 137 (SIGKILL)", "exit code 137
// (SIGKILL, OOMKilled)" or "exit unknown".
func (r Restart) ExitText() string {
	if r.ExitCode == nil {
		return "exit unknown"
	}
	s := fmt.Sprintf("exit code %d", *r.ExitCode)
	var why []string
	for _, w := range []string{r.Signal, r.ExitReason} {
		if w = Clean(w); w != "" {
			why = append(why, w)
		}
	}
	if len(why) > 0 {
		s += " (" + strings.Join(why, ", ") + ")"
	}
	return s
}

// RuleText is "rule 0 (Restart)" or "no rule (container policy)".
func (r Restart) RuleText() string {
	if r.Rule == nil {
		return "no rule (container policy)"
	}
	return fmt.Sprintf("rule %d (%s)", *r.Rule, Clean(r.Action))
}

// BackoffText is "back-off 10s".
func (r Restart) BackoffText() string {
	return "back-off " + (time.Duration(max(0, r.BackoffSeconds)) * time.Second).String()
}

// String is the Event message, at most MaxEventMessage bytes.
func (r Restart) String() string {
	return Truncate(fmt.Sprintf("Container %s restarted in place (restart %d): %s, %s, %s",
		Clean(r.Container), r.Total, r.ExitText(), r.RuleText(), r.BackoffText()), MaxEventMessage)
}

// annotations are the Event's annotations: the same values, as JSON.
func (r Restart) Annotations() map[string]string {
	b, _ := json.Marshal(r)
	return map[string]string{contract.EventAnnotationRestart: string(b)}
}

// HandOver is what one HandedOverToKubelet Event says (String), and its
// annotation contract.EventAnnotationHandOver.
type HandOver struct {
	Container string `json:"container"`
	// Total is the container's in-place restarts before the hand-over.
	Total int `json:"total"`
	// Reason is the supervisor's (RestartBudgetExhausted, ...), Message
	// its line.
	Reason   string `json:"reason"`
	Message  string `json:"message,omitempty"`
	ExitCode int32  `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
	// ExitReason is the exit's own reason (OOMKilled).
	ExitReason string `json:"exitReason,omitempty"`
}

// maxHandOverMessage bounds the supervisor's message in the Event.
const maxHandOverMessage = 256

// HandOverOf describes the hand-over s reports, its strings cleaned.
func HandOverOf(s statevol.Status, total int) HandOver {
	h := HandOver{Container: Clean(s.Container), Total: total, Reason: Clean(s.HandOver.Reason),
		Message: Truncate(CleanText(s.HandOver.Message), maxHandOverMessage)}
	if e := s.LastExit; e != nil {
		h.ExitCode, h.Signal, h.ExitReason = e.Code, Clean(e.Signal), Clean(e.Reason)
	}
	return h
}

// String is the Event message, at most MaxEventMessage bytes.
func (h HandOver) String() string {
	exit := fmt.Sprintf("exit code %d", h.ExitCode)
	if h.Signal != "" {
		exit += " (" + h.Signal + ")"
	}
	if h.ExitReason != "" {
		exit += ", " + h.ExitReason
	}
	return Truncate(fmt.Sprintf("Container %s handed to the kubelet after %d in-place restarts: %s: %s; %s",
		h.Container, h.Total, h.Reason, h.Message, exit), MaxEventMessage)
}

func (h HandOver) Annotations() map[string]string {
	b, _ := json.Marshal(h)
	return map[string]string{contract.EventAnnotationHandOver: string(b)}
}

// PodRestartMessage is the PodRestartedInPlace message.
func PodRestartMessage(gen uint64) string {
	return fmt.Sprintf("Pod restarted in place (RestartAllContainers): pod restart %d", gen)
}

// PodRestartAnnotations carry the generation as a decimal number.
func PodRestartAnnotations(gen uint64) map[string]string {
	return map[string]string{contract.EventAnnotationPodRestart: fmt.Sprint(gen)}
}

// CleanText is Clean without the length cut.
func CleanText(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || isFormat(r) {
			return '?'
		}
		return r
	}, s)
}

// Clean makes s safe to show: control and format characters (ANSI escape
// sequences, carriage returns, bidirectional overrides) and invalid UTF-8
// become '?', and the result is cut to maxFieldLen bytes.
func Clean(s string) string {
	return Truncate(CleanText(s), maxFieldLen)
}

// isFormat reports the Unicode format characters that reorder or hide
// text on a terminal (Cf: zero-width, bidirectional controls).
func isFormat(r rune) bool {
	switch {
	case r == 0xad, r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2060 && r <= 0x206f,
		r == 0xfeff, r >= 0xfff9 && r <= 0xfffb:
		return true
	}
	return false
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "...".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// AgentNamespace and AgentLabel find the node agent's pods, which
// ReadStatus checks the Events against.
const (
	AgentNamespace = "restart-supervisor-node-agent"
	AgentLabel     = "app.kubernetes.io/name=" + Component
)

// MaxAnnotation bounds the structured value ReadStatus decodes: the agent
// writes under 300 bytes.
const MaxAnnotation = 4 << 10
