package rules

import (
	"strings"
	"testing"
)

func values(n int) []int32 {
	v := make([]int32, n)
	for i := range v {
		v[i] = int32(i)
	}
	return v
}

func manyRules(n int) []Rule {
	r := make([]Rule, n)
	for i := range r {
		r[i] = in(ActionRestart, int32(i))
	}
	return r
}

// TestValidateMessages checks every error validateContainerRestartPolicy
// can report, with the API server's exact wording and field paths.
func TestValidateMessages(t *testing.T) {
	const p = "spec.containers[0]"
	for _, tc := range []struct {
		name string
		c    Container
		want []string
	}{
		{"nothing set", Container{}, nil},
		{"policy only", ctr(Never), nil},
		{"valid rules", ctr(OnFailure, in(ActionRestart, 42), notIn(ActionRestartAllContainers)), nil},
		{"max rules and values", ctr(Never, append(manyRules(19), in(ActionRestart, values(255)...))...), nil},
		{"rules without policy", Container{RestartPolicyRules: []Rule{in(ActionRestart, 1)}},
			[]string{p + ".restartPolicy: Required value: must specify restartPolicy when restart rules are used"}},
		{"unsupported policy", ctr("Sometimes"),
			[]string{p + `.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "Never", "OnFailure"`}},
		{"unsupported policy with rules", ctr("sometimes", in(ActionRestart, 1)),
			[]string{p + `.restartPolicy: Unsupported value: "sometimes": supported values: "Always", "Never", "OnFailure"`}},
		{"too many rules", ctr(Never, manyRules(21)...),
			[]string{p + ".restartPolicyRules: Too many: 21: must have at most 20 items"}},
		{"unsupported action", ctr(Never, in("Ignore", 1)),
			[]string{p + `.restartPolicyRules[0].action: Unsupported value: "Ignore": supported values: "Restart", "RestartAllContainers"`}},
		{"empty action", ctr(Never, in("", 1)),
			[]string{p + `.restartPolicyRules[0].action: Unsupported value: "": supported values: "Restart", "RestartAllContainers"`}},
		{"missing exitCodes", ctr(Never, in(ActionRestart, 1), Rule{Action: ActionRestart}),
			[]string{p + ".restartPolicyRules[1].exitCodes: Required value: must be specified"}},
		{"unsupported operator", ctr(Never, Rule{Action: ActionRestart, ExitCodes: &ExitCodes{Operator: "Foo", Values: []int32{1}}}),
			[]string{p + `.restartPolicyRules[0].exitCodes.operator: Unsupported value: "Foo": supported values: "In", "NotIn"`}},
		{"empty operator", ctr(Never, Rule{Action: ActionRestart, ExitCodes: &ExitCodes{}}),
			[]string{p + `.restartPolicyRules[0].exitCodes.operator: Unsupported value: "": supported values: "In", "NotIn"`}},
		{"too many values", ctr(Never, in(ActionRestart, values(256)...)),
			[]string{p + ".restartPolicyRules[0].exitCodes.values: Too many: 256: must have at most 255 items"}},
		{"several errors in order", Container{RestartPolicyRules: append(manyRules(20), Rule{Action: "X"})},
			[]string{
				p + ".restartPolicy: Required value: must specify restartPolicy when restart rules are used",
				p + ".restartPolicyRules: Too many: 21: must have at most 20 items",
				p + `.restartPolicyRules[20].action: Unsupported value: "X": supported values: "Restart", "RestartAllContainers"`,
				p + ".restartPolicyRules[20].exitCodes: Required value: must be specified",
			}},
		{"no range or duplicate checks (as the API server)", ctr(Never, in(ActionRestart, -5, 1000, 7, 7)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := Validate(tc.c, p)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			if (errs.Err() == nil) != (len(tc.want) == 0) {
				t.Fatalf("Err() = %v with %d errors", errs.Err(), len(errs))
			}
		})
	}
	// Without a container path the fields stand alone, as in a config file.
	if got := Validate(Container{RestartPolicyRules: []Rule{in(ActionRestart)}}, "").Error(); got != "restartPolicy: Required value: must specify restartPolicy when restart rules are used" {
		t.Fatalf("bare path: %s", got)
	}
}

func TestValidatePodPolicy(t *testing.T) {
	for p, want := range map[RestartPolicy]string{
		Always: "", OnFailure: "", Never: "",
		"":      "spec.restartPolicy: Required value",
		"never": `spec.restartPolicy: Unsupported value: "never": supported values: "Always", "OnFailure", "Never"`,
	} {
		got := ""
		if err := ValidatePodPolicy(p, "spec.restartPolicy").Err(); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", p, got, want)
		}
	}
}

func TestErrorListJoinsOnOneLine(t *testing.T) {
	l := ErrorList{{"a", "x"}, {"b", "y"}}
	if l.Error() != "a: x; b: y" {
		t.Fatal(l.Error())
	}
	if ErrorList(nil).Err() != nil {
		t.Fatal("empty list is not nil")
	}
}
