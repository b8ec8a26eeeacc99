package rules

import (
	"flag"
	"strings"
	"testing"
)

func TestParseKubeVersion(t *testing.T) {
	for in, want := range map[string]KubeVersion{
		"1.34": Kube134, "v1.35": Kube135, "v1.36.3": Kube136, "1.37.0": Kube137, " 1.36 ": Kube136,
	} {
		got, err := ParseKubeVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseKubeVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "1.33", "1.38", "2.36", "1.36x", "v1.", "36", "1.-36"} {
		if got, err := ParseKubeVersion(in); err == nil {
			t.Errorf("ParseKubeVersion(%q) = %v, want an error", in, got)
		}
	}
	if _, err := ParseKubeVersion("1.33"); err == nil || !strings.Contains(err.Error(), "known versions are 1.34, 1.35, 1.36, 1.37") {
		t.Errorf("error does not list the known versions: %v", err)
	}
}

func TestServerKubeVersion(t *testing.T) {
	for in, want := range map[string]KubeVersion{
		"v1.34.4": Kube134, "v1.35.4": Kube135, "v1.36.3-gke.1200": Kube136, "v1.37.2+k3s1": Kube137,
		"v1.38.0-beta.0": NewestKube, "v1.40.1": NewestKube,
	} {
		got, err := ServerKubeVersion(in)
		if err != nil || got != want {
			t.Errorf("ServerKubeVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"v1.33.5", "v0.0.0-master", "garbage"} {
		if got, err := ServerKubeVersion(in); err == nil {
			t.Errorf("ServerKubeVersion(%q) = %v, want an error", in, got)
		}
	}
}

func TestKubeVersionFlagAndDefault(t *testing.T) {
	var v KubeVersion
	if v.String() != NewestKube.String() || v.checks() != NewestKube.checks() {
		t.Fatalf("zero value is %s, not the newest", v)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Var(&v, "kubernetes-version", "")
	if err := fs.Parse([]string{"--kubernetes-version", "v1.35.4"}); err != nil || v != Kube135 {
		t.Fatalf("flag: %v %v", v, err)
	}
	if got := KubeVersions(); len(got) != 4 || got[0] != Kube134 || got[3] != Kube137 {
		t.Fatalf("KubeVersions() = %v", got)
	}
}

// TestValidateByVersion checks what differs between releases, with each
// release's wording (pkg/apis/core/validation/validation.go of
// k8s.io/kubernetes v1.34.4, v1.35.4, v1.36.3 and v1.37.2).
func TestValidateByVersion(t *testing.T) {
	const (
		p  = "spec.containers[0]"
		ip = "spec.initContainers[0]"
	)
	tooLong20 := p + ".restartPolicyRules: Too long: may not be more than 20 bytes"
	tooMany20 := p + ".restartPolicyRules: Too many: 21: must have at most 20 items"
	tooLong255 := p + ".restartPolicyRules[0].exitCodes.values: Too long: may not be more than 255 bytes"
	tooMany255 := p + ".restartPolicyRules[0].exitCodes.values: Too many: 256: must have at most 255 items"
	restartOnly := `: supported values: "Restart"`
	both := `: supported values: "Restart", "RestartAllContainers"`
	sidecarForbidden := ip + ".restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always"
	initRequired := ip + ".restartPolicy: Required value: must specify restartPolicy when restart rules are used"

	type want map[KubeVersion][]string
	all := func(s ...string) want {
		return want{Kube134: s, Kube135: s, Kube136: s, Kube137: s}
	}
	for _, tc := range []struct {
		name string
		init bool
		c    Container
		want want
	}{
		{"21 rules", false, ctr(Never, manyRules(21)...),
			want{Kube134: {tooLong20}, Kube135: {tooLong20}, Kube136: {tooMany20}, Kube137: {tooMany20}}},
		{"256 values", false, ctr(Never, in(ActionRestart, values(256)...)),
			want{Kube134: {tooLong255}, Kube135: {tooLong255}, Kube136: {tooMany255}, Kube137: {tooMany255}}},
		{"RestartAllContainers action", false, ctr(Never, in(ActionRestartAllContainers, 42)),
			want{Kube134: {p + `.restartPolicyRules[0].action: Unsupported value: "RestartAllContainers"` + restartOnly},
				Kube135: {p + `.restartPolicyRules[0].action: Unsupported value: "RestartAllContainers"` + restartOnly}}},
		{"unknown action", false, ctr(Never, in("Ignore", 1)),
			want{Kube134: {p + `.restartPolicyRules[0].action: Unsupported value: "Ignore"` + restartOnly},
				Kube135: {p + `.restartPolicyRules[0].action: Unsupported value: "Ignore"` + restartOnly},
				Kube136: {p + `.restartPolicyRules[0].action: Unsupported value: "Ignore"` + both},
				Kube137: {p + `.restartPolicyRules[0].action: Unsupported value: "Ignore"` + both}}},
		{"value quoted as encoding/json does", false, ctr(Never, in("<Re\tstart>", 1)),
			want{Kube134: {p + `.restartPolicyRules[0].action: Unsupported value: "\u003cRe\tstart\u003e"` + restartOnly},
				Kube135: {p + `.restartPolicyRules[0].action: Unsupported value: "\u003cRe\tstart\u003e"` + restartOnly},
				Kube136: {p + `.restartPolicyRules[0].action: Unsupported value: "\u003cRe\tstart\u003e"` + both},
				Kube137: {p + `.restartPolicyRules[0].action: Unsupported value: "\u003cRe\tstart\u003e"` + both}}},
		{"sidecar with rules", true, ctr(Always, in(ActionRestart, 1)),
			want{Kube134: {sidecarForbidden}, Kube135: {sidecarForbidden}}},
		{"sidecar with invalid rules", true, ctr(Always, manyRules(21)...),
			want{Kube134: {sidecarForbidden}, Kube135: {sidecarForbidden},
				Kube136: {strings.Replace(tooMany20, p, ip, 1)}, Kube137: {strings.Replace(tooMany20, p, ip, 1)}}},
		{"sidecar without rules", true, ctr(Always), nil},
		{"init container without policy, with rules", true, Container{RestartPolicyRules: []Rule{in(ActionRestart, 1)}},
			want{Kube135: {initRequired}, Kube136: {initRequired}, Kube137: {initRequired}}},
		{"init container without policy: only Required, rules unchecked", true, Container{RestartPolicyRules: append(manyRules(20), Rule{Action: "X"})},
			want{Kube135: {initRequired}, Kube136: {initRequired}, Kube137: {initRequired}}},
		{"init container with policy and rules", true, ctr(Never, in(ActionRestart, 1)), nil},
		{"init container with invalid rules", true, ctr(OnFailure, Rule{Action: ActionRestart}),
			all(ip + ".restartPolicyRules[0].exitCodes: Required value: must be specified")},
		{"regular container without policy, with rules", false, Container{RestartPolicyRules: []Rule{in(ActionRestart, 1)}},
			all(p + ".restartPolicy: Required value: must specify restartPolicy when restart rules are used")},
	} {
		for _, v := range KubeVersions() {
			t.Run(tc.name+"/"+v.String(), func(t *testing.T) {
				var errs ErrorList
				if tc.init {
					errs = v.ValidateInit(tc.c, ip)
				} else {
					errs = v.Validate(tc.c, p)
				}
				var got []string
				for _, e := range errs {
					got = append(got, e.Error())
				}
				if g, w := strings.Join(got, "\n"), strings.Join(tc.want[v], "\n"); g != w {
					t.Fatalf("got\n  %s\nwant\n  %s", strings.ReplaceAll(g, "\n", "\n  "), strings.ReplaceAll(w, "\n", "\n  "))
				}
			})
		}
	}
}

func TestDefaultsAreNewest(t *testing.T) {
	c := ctr(Never, manyRules(21)...)
	if Validate(c, "").Error() != NewestKube.Validate(c, "").Error() {
		t.Fatal("Validate is not NewestKube.Validate")
	}
	s := ctr(Always, in(ActionRestartAllContainers, 1))
	if ValidateInit(s, "x") != nil || Kube135.ValidateInit(s, "x") == nil {
		t.Fatal("ValidateInit is not NewestKube.ValidateInit")
	}
	doc := []byte("restartPolicy: Never\nrestartPolicyRules:\n- action: RestartAllContainers\n  exitCodes: {operator: In, values: [42]}\n")
	if _, err := Parse(doc); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if _, err := ParseFor(doc, Kube136); err != nil {
		t.Fatalf("ParseFor 1.36: %v", err)
	}
	_, err := ParseFor(doc, Kube134)
	if err == nil || err.Error() != `restartPolicyRules[0].action: Unsupported value: "RestartAllContainers": supported values: "Restart", "RestartGroup"` {
		t.Fatalf("ParseFor 1.34: %v", err)
	}
}

// RestartGroup is this project's own action: the config and the annotation
// carrier (ValidateCarried) take it on a regular container, the API fields
// (Validate) and init containers never.
func TestRestartGroupOnlyWhereCarried(t *testing.T) {
	c := ctr(Never, in(ActionRestartGroup, 42))
	for _, v := range []KubeVersion{Kube134, Kube135, Kube136, NewestKube} {
		if errs := v.ValidateCarried(c, "x"); errs != nil {
			t.Errorf("%v ValidateCarried: %v", v, errs)
		}
		errs := v.Validate(c, "x")
		if errs == nil || !strings.Contains(errs.Error(), `x.restartPolicyRules[0].action: Unsupported value: "RestartGroup"`) {
			t.Errorf("%v Validate: %v", v, errs)
		}
		if errs := v.ValidateInit(ctr(Never, in(ActionRestartGroup, 42)), "x"); errs == nil {
			t.Errorf("%v ValidateInit took RestartGroup", v)
		}
	}
	d := Decide(c, Never, 42)
	if !d.Restart || d.Action != ActionRestartGroup || d.Rule != 0 {
		t.Errorf("Decide 42 = %+v", d)
	}
	if d, h := Plan(c, Never, 42); h != RestartInPlace || d.Action != ActionRestartGroup {
		t.Errorf("Plan 42 = %+v, %v", d, h)
	}
	if d := Decide(c, Never, 1); d.Restart {
		t.Errorf("Decide 1 = %+v", d)
	}
	doc := []byte("restartPolicy: Never\nrestartPolicyRules:\n- action: RestartGroup\n  exitCodes: {operator: In, values: [42]}\n")
	if _, err := Parse(doc); err != nil {
		t.Errorf("Parse: %v", err)
	}
	if _, err := Parse(append(doc, "initContainer: true\n"...)); err == nil {
		t.Error("Parse took RestartGroup on an init container")
	}
}
