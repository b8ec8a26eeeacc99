package rules

import (
	"strings"
	"testing"
)

// TestEscalationSteps: each own restart takes its step's action, in order,
// and none is left past the sum of the steps.
func TestEscalationSteps(t *testing.T) {
	e := &Escalation{Steps: []EscalationStep{{ActionRestart, 3}, {ActionRestartGroup, 2}}}
	var got []string
	for used := 0; used < 7; used++ {
		st, k, ok := e.Step(used)
		if !ok {
			got = append(got, "hand over")
			continue
		}
		got = append(got, string(st.Action)+"@"+string(rune('0'+k)))
	}
	want := "Restart@0 Restart@0 Restart@0 RestartGroup@1 RestartGroup@1 hand over hand over"
	if strings.Join(got, " ") != want {
		t.Errorf("steps %q, want %q", strings.Join(got, " "), want)
	}
	if all, group := e.PodWide(); !all || !group {
		t.Errorf("PodWide %v %v, want both", all, group)
	}
}

// TestEscalationValidation: each bad field is named; an init container
// may not have a ladder.
func TestEscalationValidation(t *testing.T) {
	for doc, want := range map[string]string{
		`escalation: {steps: []}`:                                                    "escalation.steps: Required value",
		`escalation: {steps: [{action: Restart}]}`:                                   "escalation.steps[0].restarts: Invalid value: 0",
		`escalation: {steps: [{action: Stop, restarts: 1}]}`:                         `escalation.steps[0].action: Unsupported value: "Stop"`,
		`escalation: {steps: [{restarts: 1}]}`:                                       "escalation.steps[0].action: Required value",
		`escalation: {window: 0s, steps: [{action: Restart, restarts: 1}]}`:          "escalation.window: Invalid value",
		`escalation: {window: 1h, steps: [{action: Restart, restarts: 101}]}`:        "must be at most 100 with a window",
		`escalation: {steps: [{action: Restart, restarts: 1, extra: 1}]}`:            "escalation.steps[0].extra: unknown field",
		"initContainer: true\nescalation: {steps: [{action: Restart, restarts: 1}]}": "escalation: Forbidden",
	} {
		_, err := Parse([]byte(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}
