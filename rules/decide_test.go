package rules

import (
	"fmt"
	"testing"
)

func in(action Action, values ...int32) Rule {
	return Rule{Action: action, ExitCodes: &ExitCodes{Operator: OpIn, Values: values}}
}

func notIn(action Action, values ...int32) Rule {
	return Rule{Action: action, ExitCodes: &ExitCodes{Operator: OpNotIn, Values: values}}
}

func ctr(policy RestartPolicy, rules ...Rule) Container {
	c := Container{RestartPolicyRules: rules}
	if policy != "" {
		c.RestartPolicy = PolicyPtr(policy)
	}
	return c
}

// TestDecideTable is the kubelet's decision written out by hand, row by
// row: rules first (first match wins) only when the container sets a
// policy, then the container policy, then the pod policy.
func TestDecideTable(t *testing.T) {
	R, RA := ActionRestart, ActionRestartAllContainers
	rule := func(i int, a Action) Decision { return Decision{Restart: true, Rule: i, Action: a, Source: SourceRule} }
	cp := func(restart bool) Decision {
		return Decision{Restart: restart, Rule: -1, Source: SourceContainerPolicy}
	}
	pp := func(restart bool) Decision { return Decision{Restart: restart, Rule: -1, Source: SourcePodPolicy} }
	for _, tc := range []struct {
		name string
		c    Container
		pod  RestartPolicy
		code int32
		want Decision
	}{
		// No container policy: the pod policy alone, rules ignored.
		{"pod Always exit 0", ctr(""), Always, 0, pp(true)},
		{"pod Always exit 1", ctr(""), Always, 1, pp(true)},
		{"pod OnFailure exit 0", ctr(""), OnFailure, 0, pp(false)},
		{"pod OnFailure exit 1", ctr(""), OnFailure, 1, pp(true)},
		{"pod OnFailure exit 137", ctr(""), OnFailure, 137, pp(true)},
		{"pod Never exit 0", ctr(""), Never, 0, pp(false)},
		{"pod Never exit 1", ctr(""), Never, 1, pp(false)},
		{"pod empty means Always", ctr(""), "", 0, pp(true)},
		{"pod unknown means Always", ctr(""), "Sometimes", 0, pp(true)},
		{"rules without container policy are ignored", Container{RestartPolicyRules: []Rule{in(R, 42)}}, Never, 42, pp(false)},

		// Container policy, no rules: it decides and the pod policy is ignored.
		{"ctr Always exit 0 pod Never", ctr(Always), Never, 0, cp(true)},
		{"ctr Always exit 3 pod Never", ctr(Always), Never, 3, cp(true)},
		{"ctr OnFailure exit 0 pod Always", ctr(OnFailure), Always, 0, cp(false)},
		{"ctr OnFailure exit 1 pod Never", ctr(OnFailure), Never, 1, cp(true)},
		{"ctr OnFailure exit -1 pod Never", ctr(OnFailure), Never, -1, cp(true)},
		{"ctr Never exit 0 pod Always", ctr(Never), Always, 0, cp(false)},
		{"ctr Never exit 1 pod Always", ctr(Never), Always, 1, cp(false)},

		// In.
		{"In match", ctr(Never, in(R, 42)), Never, 42, rule(0, R)},
		{"In match among many", ctr(Never, in(R, 1, 2, 42, 255)), Never, 42, rule(0, R)},
		{"In no match falls back to Never", ctr(Never, in(R, 42)), Always, 41, cp(false)},
		{"In no match falls back to OnFailure", ctr(OnFailure, in(R, 42)), Never, 1, cp(true)},
		{"In no match falls back to Always", ctr(Always, in(R, 42)), Never, 0, cp(true)},
		{"In [] matches nothing", ctr(Never, in(R)), Never, 0, cp(false)},
		{"In 0", ctr(Never, in(R, 0)), Never, 0, rule(0, R)},
		{"In 137 (SIGKILL)", ctr(Never, in(R, 137)), Never, 137, rule(0, R)},
		{"In negative", ctr(Never, in(R, -1)), Never, -1, rule(0, R)},

		// NotIn.
		{"NotIn match", ctr(Never, notIn(R, 0)), Never, 1, rule(0, R)},
		{"NotIn no match", ctr(Never, notIn(R, 0)), Always, 0, cp(false)},
		{"NotIn [] matches everything", ctr(Never, notIn(R)), Never, 0, rule(0, R)},
		{"NotIn [] matches 255", ctr(Never, notIn(R)), Never, 255, rule(0, R)},
		{"NotIn several, listed", ctr(OnFailure, notIn(R, 0, 143)), Never, 143, cp(true)},
		{"NotIn several, listed 0", ctr(OnFailure, notIn(R, 0, 143)), Never, 0, cp(false)},

		// Order: the first matching rule decides, later ones are not consulted.
		{"first match wins", ctr(Never, in(R, 1), in(RA, 1)), Never, 1, rule(0, R)},
		{"second rule matches", ctr(Never, in(R, 2), in(RA, 1)), Never, 1, rule(1, RA)},
		{"NotIn before In", ctr(Never, notIn(RA, 5), in(R, 1)), Never, 1, rule(0, RA)},
		{"In [] skipped", ctr(Never, in(R), notIn(RA)), Never, 9, rule(1, RA)},
		{"nil exitCodes skipped", ctr(Never, Rule{Action: R}, in(RA, 3)), Never, 3, rule(1, RA)},
		{"unknown operator skipped", ctr(Never, Rule{Action: R, ExitCodes: &ExitCodes{Operator: "Foo", Values: []int32{3}}}, in(RA, 3)), Never, 3, rule(1, RA)},
		{"unknown action falls back to the container policy", ctr(Never, in("Ignore", 3), in(R, 3)), Always, 3, cp(false)},
		{"RestartAllContainers", ctr(Never, in(RA, 42)), Never, 42, rule(0, RA)},
		{"rule beats container Never", ctr(Never, notIn(R)), Always, 0, rule(0, R)},
		{"rule under OnFailure on exit 0", ctr(OnFailure, in(R, 0)), Never, 0, rule(0, R)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.c, tc.pod, tc.code); got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// kubeletShouldRestart is the kubelet's ContainerShouldRestart as the
// KEP-5307 implementation states it, written independently of Decide, to
// check every combination below.
func kubeletShouldRestart(c Container, pod RestartPolicy, code int32) bool {
	if c.RestartPolicy != nil {
		for _, r := range c.RestartPolicyRules {
			if r.ExitCodes == nil {
				continue
			}
			member := false
			for _, v := range r.ExitCodes.Values {
				member = member || v == code
			}
			matched := (r.ExitCodes.Operator == OpIn && member) || (r.ExitCodes.Operator == OpNotIn && !member)
			if !matched {
				continue
			}
			if r.Action == ActionRestart || r.Action == ActionRestartAllContainers {
				return true
			}
			break
		}
		switch *c.RestartPolicy {
		case Always:
			return true
		case OnFailure:
			return code != 0
		case Never:
			return false
		}
	}
	switch pod {
	case OnFailure:
		return code != 0
	case Never:
		return false
	}
	return true
}

// TestDecideAllCombinations walks every policy × rule set × operator ×
// exit code and checks Decide (and Plan's restart verdict) against the
// kubelet's function.
func TestDecideAllCombinations(t *testing.T) {
	policies := []RestartPolicy{"", Always, OnFailure, Never}
	ruleSets := [][]Rule{nil}
	for _, op := range []Operator{OpIn, OpNotIn} {
		for _, a := range []Action{ActionRestart, ActionRestartAllContainers} {
			for _, vals := range [][]int32{nil, {0}, {42}, {0, 1, 42}} {
				r := Rule{Action: a, ExitCodes: &ExitCodes{Operator: op, Values: vals}}
				ruleSets = append(ruleSets, []Rule{r})
				ruleSets = append(ruleSets, []Rule{in(ActionRestart, 1), r})
				ruleSets = append(ruleSets, []Rule{r, notIn(ActionRestartAllContainers, 42)})
			}
		}
	}
	n := 0
	for _, cpol := range policies {
		for _, ppol := range policies {
			for _, rs := range ruleSets {
				for _, code := range []int32{0, 1, 2, 42, 137, 143, 255, -1} {
					c := ctr(cpol, rs...)
					want := kubeletShouldRestart(c, ppol, code)
					d := Decide(c, ppol, code)
					if d.Restart != want {
						t.Errorf("container %q rules %v pod %q exit %d: Decide restarts=%v, kubelet %v", cpol, fmtRules(rs), ppol, code, d.Restart, want)
					}
					if (d.Rule >= 0) != (d.Source == SourceRule) || (d.Source == SourceRule && d.Action != rs[d.Rule].Action) {
						t.Errorf("inconsistent decision %+v", d)
					}
					// Plan must carry out exactly that verdict.
					_, h := Plan(c, ppol, code)
					kubelet := PolicyRestarts(orAlways(ppol), code)
					var restarts bool
					switch h {
					case RestartInPlace:
						restarts = true
					case HandOver:
						restarts = kubelet
					case Hold:
						restarts = false
					}
					if restarts != want {
						t.Errorf("container %q rules %v pod %q exit %d: Plan %v restarts=%v, want %v", cpol, fmtRules(rs), ppol, code, h, restarts, want)
					}
					n++
				}
			}
		}
	}
	if n < 3000 {
		t.Fatalf("only %d combinations checked", n)
	}
}

func orAlways(p RestartPolicy) RestartPolicy {
	if p == "" {
		return Always
	}
	return p
}

func fmtRules(rs []Rule) string {
	s := "["
	for _, r := range rs {
		s += fmt.Sprintf("{%s %s %v}", r.Action, r.ExitCodes.Operator, r.ExitCodes.Values)
	}
	return s + "]"
}

func TestPlan(t *testing.T) {
	R := ActionRestart
	for _, tc := range []struct {
		name string
		c    Container
		pod  RestartPolicy
		code int32
		want Handling
	}{
		{"no container policy: kubelet restarts", ctr(""), Always, 1, HandOver},
		{"no container policy: kubelet stops", ctr(""), Never, 1, HandOver},
		{"rule match under pod Never", ctr(Never, in(R, 42)), Never, 42, RestartInPlace},
		{"rule match under pod Always stays in place", ctr(Never, in(R, 42)), Always, 42, RestartInPlace},
		{"rule miss, Never under Never", ctr(Never, in(R, 42)), Never, 1, HandOver},
		{"ctr Always under pod Never", ctr(Always), Never, 0, RestartInPlace},
		{"ctr Always under pod OnFailure, exit 0", ctr(Always), OnFailure, 0, RestartInPlace},
		{"ctr Always under pod OnFailure, exit 1: kubelet restarts", ctr(Always), OnFailure, 1, HandOver},
		{"ctr Always under pod Always", ctr(Always), Always, 0, HandOver},
		{"ctr OnFailure under pod Never, exit 1", ctr(OnFailure), Never, 1, RestartInPlace},
		{"ctr OnFailure under pod Never, exit 0", ctr(OnFailure), Never, 0, HandOver},
		{"ctr OnFailure under pod OnFailure", ctr(OnFailure), OnFailure, 1, HandOver},
		{"ctr OnFailure under pod Always, exit 0: hold", ctr(OnFailure), Always, 0, Hold},
		{"ctr Never under pod Always: hold", ctr(Never), Always, 3, Hold},
		{"ctr Never under pod OnFailure, exit 1: hold", ctr(Never), OnFailure, 1, Hold},
		{"ctr Never under pod OnFailure, exit 0", ctr(Never), OnFailure, 0, HandOver},
		{"ctr Never under pod Never", ctr(Never), Never, 1, HandOver},
		{"ctr Never under empty pod policy (Always): hold", ctr(Never), "", 0, Hold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, h := Plan(tc.c, tc.pod, tc.code); h != tc.want {
				t.Fatalf("Plan = %v, want %v", h, tc.want)
			}
		})
	}
	if HandOver.String() != "handOver" || RestartInPlace.String() != "restartInPlace" || Hold.String() != "hold" {
		t.Fatal("Handling names changed; log consumers depend on them")
	}
}

// TestPlanInit: an init container's exit 0 initializes it whatever its
// rules match, except a first matching RestartAllContainers rule; a
// failure is decided like any container's.
func TestPlanInit(t *testing.T) {
	R, RA := ActionRestart, ActionRestartAllContainers
	for _, tc := range []struct {
		name string
		c    Container
		pod  RestartPolicy
		code int32
		want Handling
		src  Source
	}{
		{"exit 0 under NotIn [1]", ctr(Never, notIn(R, 1)), OnFailure, 0, HandOver, SourceInitialized},
		{"exit 0, container OnFailure", ctr(OnFailure), OnFailure, 0, HandOver, SourceInitialized},
		{"exit 0 matches RestartAllContainers", ctr(Never, in(RA, 0)), OnFailure, 0, RestartInPlace, SourceRule},
		{"exit 0, first match is Restart", ctr(Never, in(R, 0), in(RA, 0)), OnFailure, 0, HandOver, SourceInitialized},
		{"exit 3 under NotIn [1]", ctr(Never, notIn(R, 1)), Never, 3, RestartInPlace, SourceRule},
		{"exit 1 under NotIn [1], pod Never", ctr(Never, notIn(R, 1)), Never, 1, HandOver, SourceContainerPolicy},
	} {
		d, h := PlanInit(tc.c, tc.pod, tc.code)
		if h != tc.want || d.Source != tc.src {
			t.Errorf("%s: %v by %s, want %v by %s", tc.name, h, d.Source, tc.want, tc.src)
		}
		cfg := Config{Container: tc.c, PodRestartPolicy: tc.pod, InitContainer: true}
		if _, h2 := cfg.Plan(tc.code); h2 != h {
			t.Errorf("%s: Config.Plan %v, PlanInit %v", tc.name, h2, h)
		}
	}
	if _, h := (Config{Container: ctr(Never, notIn(R, 1)), PodRestartPolicy: OnFailure}).Plan(0); h != RestartInPlace {
		t.Errorf("a regular container's exit 0 under NotIn [1]: %v, want restartInPlace", h)
	}
	// An OOMKilled init container has failed, exit 0 included
	// (isInitContainerFailed): its exit 0 goes to the rules.
	oom := Config{Container: ctr(Never, notIn(R, 1)), PodRestartPolicy: OnFailure, InitContainer: true}
	if d, h := oom.PlanExit(0, true); h != RestartInPlace || d.Source != SourceRule {
		t.Errorf("an OOMKilled init container's exit 0 under NotIn [1]: %v by %s, want restartInPlace by rule", h, d.Source)
	}
	if d, h := oom.PlanExit(0, false); h != HandOver || d.Source != SourceInitialized {
		t.Errorf("an init container's exit 0 under NotIn [1]: %v by %s, want handOver, initialized", h, d.Source)
	}
	cfg, err := Parse([]byte(`{"initContainer":true,"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"NotIn","values":[1]}}]}`))
	if err != nil || !cfg.InitContainer {
		t.Fatalf("parse initContainer: %+v %v", cfg, err)
	}
	if _, err := Parse([]byte(`{"initContainer":"yes"}`)); err == nil || err.Error() != `config: initContainer: Invalid value: "yes" (line 1): must be true or false` {
		t.Fatalf("initContainer: \"yes\": %v", err)
	}
}
