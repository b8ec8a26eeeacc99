package dockerrun

import (
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestArgsBindMount(t *testing.T) {
	got, err := Args(Options{
		Image:      "nginx:1.27",
		Config:     ImageConfig{Entrypoint: []string{"/docker-entrypoint.sh"}, Cmd: []string{"nginx", "-g", "daemon off;"}, StopSignal: "SIGQUIT"},
		Supervisor: "/usr/local/bin/restart-supervisor",
		RulesJSON:  `{"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-v", "/usr/local/bin/restart-supervisor:/opt/restart-supervisor/restart-supervisor:ro",
		"--entrypoint", "/opt/restart-supervisor/restart-supervisor",
		"-e", `RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`,
		"-e", "RESTART_SUPERVISOR_STOP_SIGNALS=SIGTERM,SIGINT,SIGQUIT",
		"nginx:1.27", "--", "/docker-entrypoint.sh", "nginx", "-g", "daemon off;",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Args:\n got %q\nwant %q", got, want)
	}
}

func TestArgsReplaceCmdAndVolume(t *testing.T) {
	cfg := ImageConfig{Entrypoint: []string{"tini", "--"}, Cmd: []string{"serve"}}
	got, err := Args(Options{Image: "app", Config: cfg, Volume: "rs-bin", HasArgs: true, Args: []string{"sh", "-c", "exit 42"},
		SupervisorFlags: []string{"--log-format", "json"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-v", "rs-bin:/opt/restart-supervisor:ro", "--entrypoint", "/opt/restart-supervisor/restart-supervisor",
		"app", "--log-format", "json", "--", "tini", "--", "sh", "-c", "exit 42"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Args:\n got %q\nwant %q", got, want)
	}

	// Empty args after -- clear the CMD, as `docker run IMAGE` with an empty CMD would not.
	got, err = Args(Options{Image: "app", Config: cfg, Volume: "v", HasArgs: true})
	if err != nil {
		t.Fatal(err)
	}
	if tail := got[len(got)-3:]; !reflect.DeepEqual(tail, []string{"--", "tini", "--"}) {
		t.Errorf("tail = %q", tail)
	}
}

func TestArgsErrors(t *testing.T) {
	ok := ImageConfig{Cmd: []string{"sh"}}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no image", Options{Config: ok, Supervisor: "/s"}, "image: must be specified"},
		{"flag as image", Options{Image: "-it", Config: ok, Supervisor: "/s"}, `image "-it": must not start with '-'`},
		{"no supervisor", Options{Image: "a", Config: ok}, "supervisor: must be specified"},
		{"both", Options{Image: "a", Config: ok, Supervisor: "/s", Volume: "v"}, "give only one"},
		{"relative", Options{Image: "a", Config: ok, Supervisor: "bin/s"}, `supervisor "bin/s": must be an absolute path`},
		{"colon", Options{Image: "a", Config: ok, Supervisor: "/a:b"}, "must not contain ':'"},
		{"volume path", Options{Image: "a", Config: ok, Volume: "/host"}, "must be a volume name"},
		{"no command", Options{Image: "scratchy", Supervisor: "/s"}, "image scratchy: has neither ENTRYPOINT nor CMD"},
	} {
		_, err := Args(tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error is not one line: %q", tc.name, err)
		}
	}
}

func TestShellQuote(t *testing.T) {
	got := ShellQuote([]string{"-e", `A={"x":[1]}`, "plain/path:ro", "", "it's", "a b", "$(id)", "--"})
	want := `-e 'A={"x":[1]}' plain/path:ro '' 'it'\''s' 'a b' '$(id)' --`
	if got != want {
		t.Errorf("ShellQuote:\n got %s\nwant %s", got, want)
	}
}

// The quoted line must give back the same words when a real shell reads it.
func TestShellQuoteRoundTripThroughSh(t *testing.T) {
	words := []string{"a", "", " ", "it's", `"dq"`, "$HOME", "`id`", "x\ny", "tab\there", `back\slash`, "*", "~", "#c", "!", "é", "a=b", "&;|<>()"}
	out, err := exec.Command("/bin/sh", "-c", `printf '%s\0' `+ShellQuote(words)).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !reflect.DeepEqual(got, words) {
		t.Errorf("sh read back\n %q\nwant\n %q", got, words)
	}
}

func TestParseInspect(t *testing.T) {
	// Trimmed from real `docker image inspect` output.
	data := `[{"Id":"sha256:1","RepoTags":["busybox:test"],"Architecture":"arm","Variant":"v7","Os":"linux",
	  "Config":{"Env":["PATH=/bin"],"Entrypoint":["/bin/sh","-c"],"Cmd":["echo hi"],"WorkingDir":"","StopSignal":"SIGQUIT"}}]`
	got, err := ParseInspect("busybox:test", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := ImageConfig{Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}, StopSignal: "SIGQUIT", Platform: "linux/arm/v7"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// null Entrypoint/Cmd, as Docker writes them.
	got, err = ParseInspect("x", []byte(`[{"Os":"linux","Architecture":"amd64","Config":{"Entrypoint":null,"Cmd":null}}]`))
	if err != nil || got.Entrypoint != nil || got.Cmd != nil || got.Platform != "linux/amd64" {
		t.Errorf("got %+v, %v", got, err)
	}
	if _, err := ParseInspect("x", []byte(`[]`)); err == nil {
		t.Error("empty array accepted")
	}
	if _, err := ParseInspect("x", []byte(`{`)); err == nil {
		t.Error("bad JSON accepted")
	}
}

// A docker CLI that is not there, or an image the engine lacks, are errors
// that name the image; the second is ErrNoSuchImage so callers can fall back
// to a registry.
func TestInspectLocalErrors(t *testing.T) {
	_, err := InspectLocal(t.Context(), "/nonexistent/docker", "img")
	if err == nil || !strings.HasPrefix(err.Error(), "image img: docker image inspect:") {
		t.Errorf("missing CLI: err = %v", err)
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return
	}
	if exec.Command("docker", "info").Run() != nil {
		return
	}
	_, err = InspectLocal(t.Context(), "", "restart-supervisor-test/does-not-exist:none")
	if !errors.Is(err, ErrNoSuchImage) {
		t.Errorf("absent image: err = %v, want ErrNoSuchImage", err)
	}
}

// Mistakes in the request are usage errors, found before anything is read:
// neither the rules file nor the docker CLI named here exists.
func TestBuildUsageErrorsComeFirst(t *testing.T) {
	base := Request{Image: "app:1", RulesFile: "/nonexistent.yaml", DockerCLI: "/nonexistent/docker"}
	for _, tc := range []struct {
		edit func(*Request)
		want string
	}{
		{func(r *Request) { r.Source = "store" }, `--source: unsupported value "store"`},
		{func(r *Request) { r.LogFormat = "xml" }, `--log-format: unsupported value "xml"`},
		{func(r *Request) { r.GracePeriod = -time.Second }, "--grace-period: must not be negative"},
		{func(r *Request) { r.Supervisor, r.Volume = "/bin/true", "v" }, "give only one of them"},
	} {
		r := base
		tc.edit(&r)
		_, err := Build(t.Context(), r)
		if _, ok := errors.AsType[*UsageError](err); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Build: %v; want a usage error with %q", err, tc.want)
		}
	}
	if _, err := Build(t.Context(), base); err == nil || !strings.Contains(err.Error(), "--rules: open /nonexistent.yaml") {
		t.Errorf("Build with a missing rules file: %v", err)
	} else if _, ok := errors.AsType[*UsageError](err); ok {
		t.Errorf("a missing rules file is reported as a usage error: %v", err)
	}
}
