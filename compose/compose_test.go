package compose

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	textyaml "go.yaml.in/yaml/v3"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/dockerrun"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the generator's output")

// images stands for the local engine in these tests; test/docker runs the
// generator against a real one.
var images = map[string]dockerrun.ImageConfig{
	"demo/busybox": {Cmd: []string{"/bin/sh"}},
	"demo/web:1":   {Entrypoint: []string{"/web"}},
	"demo/proxy:2": {Entrypoint: []string{"/proxy", "--listen=$PORT"}, StopSignal: "SIGQUIT"},
	"demo/db":      {Entrypoint: []string{"/db"}, Cmd: []string{"serve", "--dir", "/var/db"}},
	"demo/yaml11":  {Cmd: []string{"echo", "no", "on", "1:20", "0x1F", "1e3", "plain"}},
}

func testOptions(warnings *[]string) Options {
	return Options{
		SupervisorImage: "restart-supervisor:dev",
		Inspect: func(_ context.Context, image string) (dockerrun.ImageConfig, error) {
			if c, ok := images[image]; ok {
				return c, nil
			}
			return dockerrun.ImageConfig{}, fmt.Errorf("image %s: %w", image, ErrNoSuchImage)
		},
		Warn: func(msg string) {
			if warnings != nil {
				*warnings = append(*warnings, msg)
			}
		},
	}
}

// Every file in testdata/in is generated and compared with testdata/out;
// go test ./compose -run TestGolden -update rewrites the outputs.
func TestGolden(t *testing.T) {
	ins, err := filepath.Glob("testdata/in/*.yaml")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range ins {
		t.Run(filepath.Base(in), func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Generate(t.Context(), data, testOptions(nil))
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			out := filepath.Join("testdata/out", filepath.Base(in))
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s (rerun with -update and read the diff):\n%s", out, got)
			}
			// The output is a file the generator refuses to wrap twice.
			if _, err := Generate(t.Context(), got, testOptions(nil)); err == nil {
				t.Errorf("generating from the output succeeded")
			}
		})
	}
}

// decode reads a generated file into plain values.
func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := textyaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, data)
	}
	return m
}

func serviceOf(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	s, ok := doc["services"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("no service %s in %v", name, doc["services"])
	}
	return s
}

// What the goldens show, checked field by field, so that a golden updated
// without reading does not hide a regression in these.
func TestGeneratedFields(t *testing.T) {
	data, _ := os.ReadFile("testdata/in/restartall.yaml")
	got, err := Generate(t.Context(), data, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, got)
	inst := serviceOf(t, doc, contract.InstallContainer)
	if fmt.Sprint(inst["command"]) != "[install /opt/restart-supervisor]" || inst["user"] != "0" || inst["image"] != "restart-supervisor:dev" {
		t.Errorf("install service: %v", inst)
	}
	for _, tc := range []struct {
		name, entrypoint, command, stop, cfg string
	}{
		// The image's entrypoint, with its '$' escaped for Compose; the
		// image STOPSIGNAL; restart: always is Always.
		{"proxy", "[/opt/restart-supervisor/restart-supervisor -- /proxy --listen=$$PORT]", "<nil>", "SIGTERM,SIGINT,SIGQUIT", `{"podRestartPolicy":"Always"}`},
		// The service's entrypoint string split into words; its
		// stop_signal; on-failure:3 is OnFailure.
		{"worker", "[/opt/restart-supervisor/restart-supervisor -- /bin/sh -c]", "[exec worker --once]", "SIGTERM,SIGINT,SIGUSR1",
			`{"restartPolicy":"Never","restartPolicyRules":[{"action":"RestartAllContainers","exitCodes":{"operator":"In","values":[88]}}],"podRestartPolicy":"OnFailure"}`},
		// Image entrypoint and CMD; no restart: is Never.
		{"db", "[/opt/restart-supervisor/restart-supervisor -- /db]", "[serve --dir /var/db]", "", `{"podRestartPolicy":"Never"}`},
	} {
		s := serviceOf(t, doc, tc.name)
		env, _ := s["environment"].(map[string]any)
		if fmt.Sprint(s["entrypoint"]) != tc.entrypoint || fmt.Sprint(s["command"]) != tc.command {
			t.Errorf("%s: entrypoint %v command %v; want %s %s", tc.name, s["entrypoint"], s["command"], tc.entrypoint, tc.command)
		}
		if env["RESTART_SUPERVISOR_CONTAINER_NAME"] != tc.name || env["RESTART_SUPERVISOR_STATE_DIR"] != "/run/restart-supervisor" ||
			env["RESTART_SUPERVISOR_POD_MEMBERS"] != "proxy:regular,worker:regular,db:regular" {
			t.Errorf("%s: environment %v", tc.name, env)
		}
		if stop, _ := env["RESTART_SUPERVISOR_STOP_SIGNALS"].(string); stop != tc.stop {
			t.Errorf("%s: stop signals %q, want %q", tc.name, stop, tc.stop)
		}
		if env["RESTART_SUPERVISOR_CONFIG"] != tc.cfg {
			t.Errorf("%s: config %v, want %s", tc.name, env["RESTART_SUPERVISOR_CONFIG"], tc.cfg)
		}
		if _, err := rules.Parse([]byte(tc.cfg)); err != nil {
			t.Errorf("%s: the supervisor would refuse its config: %v", tc.name, err)
		}
		vols := fmt.Sprint(s["volumes"])
		if !strings.Contains(vols, "restart-supervisor-bin:/opt/restart-supervisor:ro") || !strings.Contains(vols, "restart-supervisor-state:/run/restart-supervisor") {
			t.Errorf("%s: volumes %s", tc.name, vols)
		}
		dep, _ := s["depends_on"].(map[string]any)[contract.InstallContainer].(map[string]any)
		if dep["condition"] != "service_completed_successfully" {
			t.Errorf("%s: depends_on %v", tc.name, s["depends_on"])
		}
		if _, ok := s[RulesKey]; ok {
			t.Errorf("%s: %s left in the output", tc.name, RulesKey)
		}
	}
	if dep := serviceOf(t, doc, "worker")["depends_on"].(map[string]any)["proxy"]; fmt.Sprint(dep) != "map[condition:service_started]" {
		t.Errorf("worker's own depends_on changed: %v", dep)
	}
}

// Without RestartAllContainers, a service without rules is written back as
// it was, byte for byte, comments included; so is everything around.
func TestUnruledServicesUnchanged(t *testing.T) {
	data, _ := os.ReadFile("testdata/in/restart.yaml")
	got, err := Generate(t.Context(), data, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"# A worker restarted in place on exit 42; web has no rules and stays as it is.\n",
		"  web:\n    image: demo/web:1\n    command: [\"httpd\", \"-f\", \"-p\", \"8080\"] # the server\n    restart: unless-stopped\n  worker:\n",
		"    # The image has no entrypoint: the command is the whole argv.\n",
	} {
		if !strings.Contains(string(got), line) {
			t.Errorf("output lacks %q:\n%s", line, got)
		}
	}
	doc := decode(t, got)
	web := serviceOf(t, doc, "web")
	if len(web) != 3 {
		t.Errorf("web changed: %v", web)
	}
	w := serviceOf(t, doc, "worker")
	if w["command"] != "sh -c 'if [ -e /data/marker ]; then exec sleep 1000; fi; touch /data/marker; exit 42'" {
		t.Errorf("worker command: %q", w["command"])
	}
	if fmt.Sprint(w["environment"]) != `[MODE=batch RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],"podRestartPolicy":"Never","backoff":{"initial":"1s"}} RESTART_SUPERVISOR_STATE_DIR=/run/restart-supervisor RESTART_SUPERVISOR_CONTAINER_NAME=worker]` {
		t.Errorf("worker environment: %v", w["environment"])
	}
	if _, ok := w["environment"].([]any); !ok {
		t.Errorf("worker environment lost its list form")
	}
}

// Merge keys: the service's own edits must carry what it merged, and
// must not change the anchored mapping other services merge.
func TestMergeKeys(t *testing.T) {
	data, _ := os.ReadFile("testdata/in/merge.yaml")
	got, err := Generate(t.Context(), data, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, got)
	w := serviceOf(t, doc, "worker")
	env := w["environment"].(map[string]any)
	if env["SHARED"] != "1" || env["RESTART_SUPERVISOR_CONTAINER_NAME"] != "worker" {
		t.Errorf("worker environment: %v", env)
	}
	if fmt.Sprint(w["volumes"]) != "[data:/data restart-supervisor-bin:/opt/restart-supervisor:ro restart-supervisor-state:/run/restart-supervisor]" {
		t.Errorf("worker volumes: %v", w["volumes"])
	}
	o := serviceOf(t, doc, "other")
	if fmt.Sprint(o["environment"]) != "map[SHARED:1]" || fmt.Sprint(o["volumes"]) != "[data:/data]" || o["entrypoint"] != nil {
		t.Errorf("other changed through the shared anchor: %v", o)
	}
}

// Mistakes are one line naming the service and the field.
func TestErrors(t *testing.T) {
	base := func(extra string) string {
		return "services:\n  worker:\n    image: demo/busybox\n" + extra
	}
	rulesDoc := "    x-restart-rules:\n      restartPolicy: Never\n      restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [42]}}]\n"
	for _, tc := range []struct{ in, want string }{
		{"services: {}\n", "no service carries x-restart-rules"},
		{"version: '1'\n", "services: must be a mapping"},
		{"services: [a]\n", "services: must be a mapping"},
		{"a: 1\n---\nb: 2\n", "more than one YAML document"},
		{base("    x-restart-rules:\n      restartPolicyRules: [{action: Reboot}]\n"),
			"service worker: x-restart-rules: restartPolicy: Required value: must specify restartPolicy when restart rules are used; restartPolicyRules[0].action: Unsupported value: \"Reboot\""},
		{base("    x-restart-rules: {restartPolicy: Sometimes}\n"), "service worker: x-restart-rules: restartPolicy: Unsupported value: \"Sometimes\""},
		{base("    x-restart-rules: {restartPolicyRule: []}\n"), "service worker: x-restart-rules: "},
		{base("    restart: always\n    x-restart-rules:\n      podRestartPolicy: Never\n"),
			"service worker: x-restart-rules: podRestartPolicy: Never, but the service's restart: makes it Always"},
		{base("    restart: sometimes\n" + rulesDoc), "service worker: x-restart-rules: restart: unsupported value sometimes"},
		{base("    environment: [RESTART_SUPERVISOR_CONFIG=x]\n" + rulesDoc), "service worker: environment.RESTART_SUPERVISOR_CONFIG: set by the service"},
		{base("    volumes: [\"s:/run/restart-supervisor/\"]\n" + rulesDoc), "service worker: volumes[0]: mounts /run/restart-supervisor"},
		{base("    entrypoint: [/opt/restart-supervisor/restart-supervisor, --]\n" + rulesDoc), "service worker: entrypoint: already runs"},
		{base("    command: \"sh -c 'x\"\n" + rulesDoc), "service worker: command: unterminated single quote"},
		{base("    command: [sh, [x]]\n" + rulesDoc), "service worker: command[1]: must be a string"},
		{"services:\n  worker:\n    image: demo/absent:1\n" + rulesDoc, "service worker: image demo/absent:1: not in the local engine; pull or build it first"},
		{"services:\n  worker:\n    build: .\n" + rulesDoc, "service worker: image: not set (a build-only service)"},
		{"services:\n  restart-supervisor-install: {image: x}\n  worker:\n    image: demo/busybox\n" + rulesDoc, "services.restart-supervisor-install: already present"},
		{base(rulesDoc) + "volumes:\n  restart-supervisor-state: {}\n", "volumes.restart-supervisor-state: already present"},
		{"services:\n  a/b:\n    image: demo/busybox\n" + rulesDoc, "service a/b: name must not"},
		{"services:\n  worker: &w\n    image: demo/busybox\n" + rulesDoc + "  again: *w\n", "service worker: is an anchor (&w) other services may alias"},
		// Under RestartAllContainers an unruled service is wrapped too.
		{"services:\n  web: &w\n    image: demo/busybox\n  worker:\n    image: demo/busybox\n    x-restart-rules:\n      restartPolicy: Never\n      restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}]\n",
			"service web: is an anchor (&w) other services may alias"},
		{base("    x-restart-rules:\n      restartPolicy: Never\n      restartPolicyRules:\n" + strings.Repeat("        - {action: Restart, exitCodes: {operator: In, values: [1]}}\n", 30)),
			"service worker: x-restart-rules: restartPolicyRules: Too many"},
	} {
		_, err := Generate(t.Context(), []byte(tc.in), testOptions(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Generate(%q): %v\nwant an error with %q", tc.in, err, tc.want)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Generate(%q): error spans lines: %q", tc.in, err)
		}
	}
	big := append([]byte("services:\n"), bytes.Repeat([]byte("#"), MaxInputSize)...)
	if _, err := Generate(t.Context(), big, testOptions(nil)); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized input: %v", err)
	}
}

// A service that gives its entrypoint does not need its image, but its
// STOPSIGNAL is then unknown: a warning, not an error.
func TestAbsentImageWithEntrypoint(t *testing.T) {
	var warnings []string
	in := "services:\n  worker:\n    image: demo/absent:1\n    entrypoint: [/app]\n    x-restart-rules: {restartPolicy: OnFailure}\n"
	got, err := Generate(t.Context(), []byte(in), testOptions(&warnings))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "service worker: image demo/absent:1 is not in the local engine, so its STOPSIGNAL is unknown") {
		t.Errorf("warnings: %q", warnings)
	}
	if e := serviceOf(t, decode(t, got), "worker")["entrypoint"]; fmt.Sprint(e) != "[/opt/restart-supervisor/restart-supervisor -- /app]" {
		t.Errorf("entrypoint %v", e)
	}
}

func TestSplitWords(t *testing.T) {
	for in, want := range map[string]string{
		`sh -c 'a b'`:         `[sh -c a b]`,
		`echo "a \"b\" \$x"`:  `[echo a "b" $x]`,
		`a\ b  c`:             `[a b c]`,
		`x"y"'z'`:             `[xyz]`,
		`  `:                  `[]`,
		`echo "it's"`:         `[echo it's]`,
		`printf '%s\n' "$$H"`: `[printf %s\n $$H]`,
	} {
		got, err := splitWords(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("splitWords(%q) = %q, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{`'a`, `"a`, `a\`} {
		if _, err := splitWords(in); err == nil {
			t.Errorf("splitWords(%q): no error", in)
		}
	}
}

// Strings a YAML 1.1 reader (docker-compose 1.x) would take for booleans or
// numbers are quoted when the generator writes them (here the image's CMD).
func TestYAML11Quoting(t *testing.T) {
	in := "services:\n  worker:\n    image: demo/yaml11\n    x-restart-rules: {restartPolicy: Never}\n"
	got, err := Generate(t.Context(), []byte(in), testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `command: [echo, "no", "on", "1:20", "0x1F", "1e3", plain]`) {
		t.Errorf("output:\n%s", got)
	}
}

// Every member of a Compose file under RestartAllContainers carries the
// whole member list (Compose has no downward API): 400 services of
// 40-character names would add 400 copies of 17 kB. The file is refused
// before any service is wrapped.
func TestMembersOutputBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range 400 {
		fmt.Fprintf(&b, "  %s-%03d:\n    image: demo/busybox\n    entrypoint: [/app]\n", strings.Repeat("s", 36), i)
		if i == 0 {
			b.WriteString("    x-restart-rules:\n      restartPolicy: Never\n      restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [88]}}]\n")
		}
	}
	out, err := Generate(t.Context(), []byte(b.String()), testOptions(nil))
	want := fmt.Sprintf("more than %d", maxMembersOutput)
	if err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 300 {
		t.Fatalf("input of %d bytes: output of %d bytes, error %v; want one with %q", b.Len(), len(out), err, want)
	}
	t.Logf("input of %d bytes: %v", b.Len(), err)
}

// TestWatchdogInRules: the whole config travels in x-restart-rules, the
// watchdog and an escalation ladder included, validated as the supervisor
// validates them.
func TestWatchdogInRules(t *testing.T) {
	in := []byte(`services:
  trainer:
    image: trainer:1
    entrypoint: [python]
    command: [train.py]
    x-restart-rules:
      restartPolicy: Never
      restartPolicyRules: [{action: Restart, exitCodes: {operator: In, values: [124]}}]
      watchdog: {outputPattern: 'step [0-9]+', stallSeconds: 60}
      escalation: {steps: [{action: Restart, restarts: 3}]}
`)
	got, err := Generate(t.Context(), in, testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `"watchdog":{"outputPattern":"step [0-9]+","stallSeconds":60}`) ||
		!strings.Contains(string(got), `"escalation":{"steps":[{"action":"Restart","restarts":3}]}`) {
		t.Errorf("the generated file lacks the watchdog or the ladder:\n%s", got)
	}
	bad := []byte(strings.Replace(string(in), "stallSeconds: 60", "stallSeconds: 0", 1))
	if _, err := Generate(t.Context(), bad, testOptions(nil)); err == nil || !strings.Contains(err.Error(), "watchdog.stallSeconds") {
		t.Errorf("stallSeconds 0: %v, want an error naming watchdog.stallSeconds", err)
	}
}
