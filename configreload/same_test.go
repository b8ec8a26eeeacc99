package configreload

import (
	"testing"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

func TestSameConfig(t *testing.T) {
	parse := func(doc string) rules.Config {
		t.Helper()
		c, err := rules.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	base := parse("restartPolicy: Never\nrestartPolicyRules:\n- action: Restart\n  exitCodes: {operator: In, values: [42]}\n")
	for _, tc := range []struct {
		doc  string
		same bool
	}{
		{`{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`, true},
		{"# a comment\nrestartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\n", true},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [43]}}]\n", false},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: NotIn, values: [42]}}]\n", false},
		{"restartPolicy: OnFailure\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\n", false},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\npodRestartPolicy: Never\n", false},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\nbackoff: {initial: 0s}\n", false},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\nbackoff: {initial: 10s}\n", false},
		{"restartPolicy: Never\nrestartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\nprobes: {liveness: {exec: {command: [true]}}}\n", false},
	} {
		if got := sameConfig(base, parse(tc.doc)); got != tc.same {
			t.Errorf("sameConfig(base, %q) = %v, want %v", tc.doc, got, tc.same)
		}
	}
}
