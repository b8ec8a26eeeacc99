package rules

import (
	"strings"
	"testing"
	"time"
)

func TestParseYAMLAndJSON(t *testing.T) {
	yamlDoc := `
restartPolicy: Never
restartPolicyRules:
- action: Restart
  exitCodes:
    operator: In
    values: [42, 43]
- action: RestartAllContainers
  exitCodes: {operator: NotIn, values: []}
podRestartPolicy: OnFailure
backoff: {initial: 1s, max: 1m, resetAfter: 0s}
`
	c, err := Parse([]byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	if *c.RestartPolicy != Never || len(c.RestartPolicyRules) != 2 || c.RestartPolicyRules[0].ExitCodes.Values[1] != 43 ||
		c.RestartPolicyRules[1].Action != ActionRestartAllContainers || c.Pod() != OnFailure ||
		c.Backoff.InitialDelay() != time.Second || c.Backoff.MaxDelay() != time.Minute || c.Backoff.ResetAfterDuration() != 0 {
		t.Fatalf("parsed %+v", c)
	}
	// The JSON the injector writes parses back to the same document.
	js, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse(js)
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	js2, _ := c2.Marshal()
	if string(js) != string(js2) {
		t.Fatalf("round trip changed the document:\n%s\n%s", js, js2)
	}
	if !strings.Contains(string(js), `"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42,43]}}`) {
		t.Fatalf("JSON keys differ from core/v1: %s", js)
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RestartPolicy != nil || c.Pod() != Always {
		t.Fatalf("defaults: %+v", c)
	}
	b := c.Backoff
	if b.InitialDelay() != 10*time.Second || b.MaxDelay() != 300*time.Second || b.ResetAfterDuration() != 10*time.Minute {
		t.Fatalf("backoff defaults differ from the kubelet's CrashLoopBackOff: %v %v %v", b.InitialDelay(), b.MaxDelay(), b.ResetAfterDuration())
	}
}

func TestBackoffDelay(t *testing.T) {
	d := func(s string) *Duration {
		v, _ := time.ParseDuration(s)
		x := Duration(v)
		return &x
	}
	for _, tc := range []struct {
		b    Backoff
		want []time.Duration
	}{
		{Backoff{}, []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second, 300 * time.Second}},
		{Backoff{Initial: d("100ms"), Max: d("350ms")}, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond, 350 * time.Millisecond}},
		{Backoff{Initial: d("0s")}, []time.Duration{0, 0, 0}},
		{Backoff{Initial: d("1s"), Max: d("0s")}, []time.Duration{0, 0, 0}},
		{Backoff{Initial: d("5s"), Max: d("1s")}, []time.Duration{0, time.Second, time.Second}},
	} {
		for n, want := range tc.want {
			if got := tc.b.Delay(n); got != want {
				t.Errorf("%+v Delay(%d) = %v, want %v", tc.b, n, got, want)
			}
		}
	}
	// Large counts must not overflow into a negative or zero delay.
	b := Backoff{Initial: d("1ns"), Max: d("1h")}
	if got := b.Delay(1000); got != time.Hour {
		t.Fatalf("Delay(1000) = %v", got)
	}
}

// TestParseErrors: every bad document is one line that names the field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{``, "config is empty"},
		{`null`, "config is empty"},
		{`[1]`, "config: must be a mapping"},
		{`restartPolicy: Never` + "\n---\n{}", "more than one YAML document"},
		{`restartPolicy: [`, "config: yaml:"},
		{`restartpolicy: Never`, "config: restartpolicy: unknown field (line 1); known fields: backoff, escalation, handOverExitCodes, initContainer, podRestartPolicy, preRestartCheck, probes, progress, restartBudget, restartPolicy, restartPolicyRules, watchdog"},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCode":{}}]}`, "config: restartPolicyRules[0].exitCode: unknown field"},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","value":[1]}}]}`, "config: restartPolicyRules[0].exitCodes.value: unknown field"},
		{`backoff: {initial: 1s, maximum: 2s}`, "config: backoff.maximum: unknown field"},
		{`backoff: {initial: soon}`, `config: backoff.initial: Invalid value: "soon" (line 1): must be a Go duration such as "10s"`},
		{`backoff: {max: 10}`, `config: backoff.max: Invalid value: "10"`},
		{`backoff: 5s`, `config: backoff: Invalid value: "5s" (line 1): must be a mapping`},
		{`restartPolicy: [Never]`, "config: restartPolicy: Invalid value: a list (line 1): must be a string"},
		{`restartPolicyRules: {action: Restart}`, "config: restartPolicyRules: Invalid value: a mapping (line 1): must be a list"},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":["x"]}}]}`, `config: restartPolicyRules[0].exitCodes.values[0]: Invalid value: "x"`},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[4294967296]}}]}`, `restartPolicyRules[0].exitCodes.values[0]: Invalid value: "4294967296" (line 1): must be a 32-bit integer`},
		{`restartPolicy: Sometimes`, `restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure"`},
		{`podRestartPolicy: always`, `podRestartPolicy: Unsupported value: "always": supported values: "Always", "OnFailure", "Never"`},
		{`{"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[1]}}]}`, "restartPolicy: Required value: must specify restartPolicy when restart rules are used"},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart"}]}`, "restartPolicyRules[0].exitCodes: Required value: must be specified"},
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"values":[1]}}]}`, `restartPolicyRules[0].exitCodes.operator: Unsupported value: "": supported values: "In", "NotIn"`},
		{`backoff: {initial: -1s}`, `backoff.initial: Invalid value: "-1s": must not be negative`},
		{`backoff: {resetAfter: -1m}`, `backoff.resetAfter: Invalid value: "-1m0s": must not be negative`},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.doc, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q lacks %q", tc.doc, err, tc.want)
		}
		if strings.ContainsAny(err.Error(), "\n\r") {
			t.Errorf("%q: error is not one line: %q", tc.doc, err)
		}
	}
}
