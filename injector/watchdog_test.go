package injector

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// TestWatchdogFromAnnotation: a container's watchdog in the rules
// annotation reaches its supervisor's config whole; the other container,
// without one, gets none.
func TestWatchdogFromAnnotation(t *testing.T) {
	res, err := New(Options{}).MutatePod(context.Background(),
		backoffPod(`a: {watchdog: {heartbeatFile: /ckpt/heartbeat, outputPattern: 'step [0-9]+', firstHeartbeatSeconds: 600, stallSeconds: 120, exitCode: 75, gracePeriodSeconds: 5}}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Pod.Spec.Containers {
		c := &res.Pod.Spec.Containers[i]
		doc, _ := envOf(c, contract.EnvConfig)
		var cfg rules.Config
		if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
			t.Fatal(err)
		}
		w := cfg.Watchdog
		switch {
		case c.Name == "b" && w != nil:
			t.Errorf("container b got a watchdog: %s", doc)
		case c.Name == "a" && (w == nil || w.HeartbeatFile != "/ckpt/heartbeat" || w.OutputPattern != "step [0-9]+" || w.FirstHeartbeatSeconds != 600 ||
			w.StallSeconds != 120 || w.Code() != 75 || w.GracePeriodSeconds == nil || *w.GracePeriodSeconds != 5):
			t.Errorf("container a's watchdog: %s", doc)
		}
	}
}

// TestWatchdogAnnotationErrors: each bad watchdog field is refused in one
// line that names the annotation and the field; a pattern is bounded in
// length, and RE2 keeps any pattern's match linear in the line.
func TestWatchdogAnnotationErrors(t *testing.T) {
	for _, tc := range []struct{ ann, want string }{
		{"a: {watchdog: {stallSeconds: 10}}", "watchdog.heartbeatFile: Required value"},
		{"a: {watchdog: {heartbeatFile: hb, stallSeconds: 10}}", `watchdog.heartbeatFile: Invalid value: "hb": must be an absolute path`},
		{"a: {watchdog: {heartbeatFile: /hb}}", "watchdog.stallSeconds: Invalid value: 0"},
		{"a: {watchdog: {outputPattern: 'step (', stallSeconds: 10}}", "watchdog.outputPattern: Invalid value"},
		{"a: {watchdog: {outputPattern: '" + strings.Repeat("a", rules.MaxOutputPattern+1) + "', stallSeconds: 10}}", "watchdog.outputPattern: Too long"},
		{"a: {watchdog: {heartbeatFile: /hb, stallSeconds: 10, exitCode: 0}}", "watchdog.exitCode: Invalid value: 0"},
		{"a: {watchdog: {heartbeatFile: /hb, stallSeconds: 10, gracePeriodSeconds: -1}}", "watchdog.gracePeriodSeconds: Invalid value: -1"},
		{"a: {watchdog: {heartbeatFile: /hb, stallSeconds: 10, timeout: 5}}", `unknown field "timeout"`},
	} {
		_, err := New(Options{}).MutatePod(context.Background(), backoffPod(tc.ann))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), contract.AnnotationRules) || strings.Contains(err.Error(), "\n") {
			t.Errorf("annotation %.60q: error %v, want one line with %q naming the annotation", tc.ann, err, tc.want)
		}
	}
}

// TestEscalationFromAnnotation: the ladder reaches the supervisor's config;
// a ladder with RestartGroup makes every container of the pod a member, as
// a RestartGroup rule does; bad fields are one line naming them.
func TestEscalationFromAnnotation(t *testing.T) {
	res, err := New(Options{}).MutatePod(context.Background(),
		backoffPod(`a: {escalation: {window: 1h, steps: [{action: Restart, restarts: 3}, {action: RestartGroup, restarts: 2}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := envOf(&res.Pod.Spec.Containers[0], contract.EnvConfig)
	var cfg rules.Config
	if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if e := cfg.Escalation; e == nil || e.WindowDuration().String() != "1h0m0s" || len(e.Steps) != 2 || e.Steps[1].Action != rules.ActionRestartGroup {
		t.Errorf("container a's escalation: %s", doc)
	}
	for i := range res.Pod.Spec.Containers {
		if _, ok := envOf(&res.Pod.Spec.Containers[i], contract.EnvPodMembers); !ok {
			t.Errorf("container %s is no pod member under a ladder with RestartGroup", res.Pod.Spec.Containers[i].Name)
		}
	}
	for _, tc := range []struct{ ann, want string }{
		{"a: {escalation: {steps: [{action: Stop, restarts: 1}]}}", `escalation.steps[0].action: Unsupported value: "Stop"`},
		{"a: {escalation: {window: soon, steps: [{action: Restart, restarts: 1}]}}", `escalation.window: Invalid value: "soon"`},
		{"a: {escalation: {steps: {action: Restart}}}", "a.escalation.steps: must be a list"},
		{"a: {escalation: {steps: [{action: Restart, restarts: 1, to: x}]}}", `unknown field "to"`},
	} {
		_, err := New(Options{}).MutatePod(context.Background(), backoffPod(tc.ann))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("annotation %q: error %v, want one line with %q", tc.ann, err, tc.want)
		}
	}
}
