package rules

import "testing"

var benchDoc = []byte(`{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"1s","max":"1m"},
"restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42,43,44]}},
{"action":"RestartAllContainers","exitCodes":{"operator":"NotIn","values":[0,1]}}]}`)

func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse(benchDoc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan(b *testing.B) {
	c, _ := Parse(benchDoc)
	for b.Loop() {
		Plan(c.Container, c.Pod(), 137)
	}
}
