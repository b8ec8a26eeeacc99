package rules

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary documents to Parse. Whatever the input, Parse
// must not panic, an error must be one line, and an accepted document must
// validate, survive a JSON round trip unchanged, and give every exit code a
// decision consistent with its own rules.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `restartPolicy: Never`,
		"restartPolicy: Never\nrestartPolicyRules:\n- action: Restart\n  exitCodes: {operator: In, values: [42]}\npodRestartPolicy: Never\n",
		`{"restartPolicy":"OnFailure","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"NotIn","values":[]}}],"backoff":{"initial":"1s","max":"1m","resetAfter":"0s"}}`,
		`backoff: {initial: -1s}`, `restartPolicyRules: [{action: X}]`, "a: &a [*a]", `{"restartPolicy": 1}`,
		"restartPolicy: Never\n---\n{}", `{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[0x10, -1, 2147483647]}}]}`,
		"restartPolicy: Always\nrestartBudget: {maxRestarts: 3, window: 10m}\nhandOverExitCodes: [93]\npreRestartCheck: {command: [/bin/check, -x], timeoutSeconds: 5}\nprogress: {file: /ckpt/iteration, maxStalledRestarts: 2}\n",
		`{"restartBudget":{"maxRestarts":0},"handOverExitCodes":[],"preRestartCheck":{"command":["true"]},"progress":{"file":"/p","maxStalledRestarts":1}}`,
		`restartBudget: {window: 0s}`, `progress: {file: rel}`, `preRestartCheck: {command: [""], timeoutSeconds: -1}`,
		"watchdog: {heartbeatFile: /hb, outputPattern: 'step [0-9]+', firstHeartbeatSeconds: 60, stallSeconds: 10, exitCode: 124, gracePeriodSeconds: 2}\n",
		`watchdog: {outputPattern: '(a|b', stallSeconds: 0}`, `watchdog: {}`,
		"escalation: {window: 1h, steps: [{action: Restart, restarts: 3}, {action: RestartGroup, restarts: 2}]}\n",
		`escalation: {steps: [{action: Restart, restarts: 0}]}`, `{"escalation":{"steps":[]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a document that Validate rejects: %v", err)
		}
		js, err := cfg.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		back, err := Parse(js)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", js, err)
		}
		js2, _ := back.Marshal()
		if string(js) != string(js2) {
			t.Fatalf("JSON round trip changed the document:\n%s\n%s", js, js2)
		}
		for _, code := range []int32{0, 1, 42, 137, 143, 255, -1} {
			d, h := Plan(cfg.Container, cfg.Pod(), code)
			if d.Rule >= len(cfg.RestartPolicyRules) || (d.Rule >= 0) != (d.Source == SourceRule) {
				t.Fatalf("exit %d: decision %+v does not fit the %d rules", code, d, len(cfg.RestartPolicyRules))
			}
			if h == RestartInPlace && !d.Restart || h == Hold && d.Restart {
				t.Fatalf("exit %d: handling %v contradicts decision %+v", code, h, d)
			}
		}
		_ = cfg.Backoff.Delay(3)
	})
}
