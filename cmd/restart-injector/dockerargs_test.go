package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// fakeDocker writes a docker CLI stand-in that answers `docker image inspect`
// with the given JSON (and "No such image" for anything else), so the flag
// handling is tested without an engine; test/docker runs the real one.
func fakeDocker(t *testing.T, image, inspectJSON string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "inspect.json"), []byte(inspectJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
[ "$1 $2 $3" = "image inspect --" ] || { echo "unexpected: $*" >&2; exit 3; }
[ "$4" = '` + image + `' ] || { echo "Error: No such image: $4" >&2; exit 1; }
cat '` + filepath.Join(dir, "inspect.json") + `'
`
	path := filepath.Join(dir, "docker")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func fakeSupervisor(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "restart-supervisor")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func runDockerArgs(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := dockerArgs(t.Context(), args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

const appInspect = `[{"Os":"linux","Architecture":"amd64","Config":{"Entrypoint":["/entry.sh"],"Cmd":["serve","--port","80"]}}]`

func TestDockerArgsFlagsAroundImage(t *testing.T) {
	docker := fakeDocker(t, "app:1", appInspect)
	sup := fakeSupervisor(t)
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	os.WriteFile(rules, []byte("restartPolicy: Never\nrestartPolicyRules:\n- action: Restart\n  exitCodes: {operator: In, values: [42]}\n"), 0o644)

	// Flags before and after IMAGE, args after -- replace CMD.
	code, out, errOut := runDockerArgs(t, "", "--docker", docker, "app:1", "--rules", rules, "--supervisor", sup, "--format", "json", "--grace-period", "8s", "--", "sh", "-c", "exit 42")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var argv []string
	if err := json.Unmarshal([]byte(out), &argv); err != nil {
		t.Fatal(err)
	}
	want := []string{"-v", sup + ":/opt/restart-supervisor/restart-supervisor:ro", "--entrypoint", "/opt/restart-supervisor/restart-supervisor",
		"-e", `RESTART_SUPERVISOR_CONFIG={"restartPolicy":"Never","restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}],"podRestartPolicy":"Never"}`,
		"app:1", "--grace-period", "8s", "--", "/entry.sh", "sh", "-c", "exit 42"}
	if !reflect.DeepEqual(argv, want) {
		t.Errorf("argv:\n got %q\nwant %q", argv, want)
	}

	// Default shell form, CMD kept, rules from stdin with an explicit pod policy kept as written.
	code, out, errOut = runDockerArgs(t, `{"restartPolicy":"OnFailure","podRestartPolicy":"Always"}`, "app:1", "--docker", docker, "--supervisor", sup, "--rules", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantLine := "-v " + sup + ":/opt/restart-supervisor/restart-supervisor:ro --entrypoint /opt/restart-supervisor/restart-supervisor " +
		`-e 'RESTART_SUPERVISOR_CONFIG={"restartPolicy":"OnFailure","podRestartPolicy":"Always"}' app:1 -- /entry.sh serve --port 80` + "\n"
	if out != wantLine {
		t.Errorf("shell line:\n got %s\nwant %s", out, wantLine)
	}
}

func TestDockerArgsErrors(t *testing.T) {
	docker := fakeDocker(t, "app:1", appInspect)
	sup := fakeSupervisor(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("restartPolicy: Never\nrestartPolicyRules:\n- action: Restart\n  exitCodes: {operator: Foo, values: [1]}\n"), 0o644)
	t.Setenv("PATH", "/nonexistent")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, exitUsage, "want exactly one IMAGE, got 0"},
		{[]string{"a", "b", "--supervisor", sup}, exitUsage, "want exactly one IMAGE, got 2"},
		{[]string{"app:1", "--format", "yaml", "--supervisor", sup}, exitUsage, `--format: unsupported value "yaml"`},
		{[]string{"app:1", "--nope"}, exitUsage, "unknown flag: --nope"},
		{[]string{"app:1", "--docker", docker, "--supervisor", sup, "--rules", bad}, exitFailure,
			`restartPolicyRules[0].exitCodes.operator: Unsupported value: "Foo"`},
		{[]string{"app:1", "--docker", docker, "--supervisor", sup, "--rules", "/nonexistent.yaml"}, exitFailure, "--rules: open /nonexistent.yaml"},
		{[]string{"app:1", "--docker", docker}, exitFailure, "restart-supervisor is not in PATH"},
		{[]string{"app:1", "--docker", docker, "--supervisor", "/nonexistent/rs"}, exitFailure, "--supervisor /nonexistent/rs: no such file or directory"},
		{[]string{"app:1", "--docker", docker, "--supervisor", bad}, exitFailure, "not an executable file"},
		{[]string{"app:1", "--docker", docker, "--supervisor", sup, "--volume", "v"}, exitUsage, "give only one of them"},
		{[]string{"other:2", "--docker", docker, "--supervisor", sup, "--source", "local"}, exitFailure, "image other:2: not in the local engine"},
		{[]string{"app:1", "--supervisor", sup, "--source", "store"}, exitUsage, `--source: unsupported value "store"`},
	} {
		code, _, errOut := runDockerArgs(t, "", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("docker-args %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// A registry image, read through the registry protocol from an in-process
// registry on loopback: the engine does not have it, so auto falls back.
func TestDockerArgsFromRegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	push := func(ref string, img v1.Image) {
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
	}
	withConfig := func(arch, variant string, entry, cmd []string) v1.Image {
		cf, err := empty.Image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture, cf.Variant = "linux", arch, variant
		cf.Config.Entrypoint, cf.Config.Cmd = entry, cmd
		img, err := mutate.ConfigFile(empty.Image, cf)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	push(host+"/app:single", withConfig("amd64", "", []string{"/app"}, []string{"--serve"}))
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: withConfig("amd64", "", []string{"/app-amd64"}, nil), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: withConfig("arm", "v7", []string{"/app-armv7"}, nil), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}}},
	)
	r, _ := name.ParseReference(host+"/app:multi", name.Insecure)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}

	docker := fakeDocker(t, "none", "[]")
	sup := fakeSupervisor(t)
	tail := func(args ...string) string {
		t.Helper()
		code, out, errOut := runDockerArgs(t, "", append([]string{"--docker", docker, "--supervisor", sup, "--insecure-registry", host}, args...)...)
		if code != exitOK {
			t.Fatalf("docker-args %q: exit %d: %s", args, code, errOut)
		}
		_, after, _ := strings.Cut(strings.TrimSpace(out), " -- ")
		return after
	}
	if got := tail(host + "/app:single"); got != "/app --serve" {
		t.Errorf("single-platform image: command %q", got)
	}
	if got := tail(host+"/app:multi", "--source", "registry", "--platform", "linux/amd64"); got != "/app-amd64" {
		t.Errorf("index, linux/amd64: command %q", got)
	}
	if got := tail(host+"/app:multi", "--platform", "linux/arm"); got != "/app-armv7" {
		t.Errorf("index, linux/arm: command %q", got)
	}
	code, _, errOut := runDockerArgs(t, "", "--docker", docker, "--supervisor", sup, "--insecure-registry", host, host+"/app:multi", "--platform", "linux/s390x")
	if code != exitFailure || !strings.Contains(errOut, "no linux/s390x image in the registry; available platforms: linux/amd64, linux/arm/v7") {
		t.Errorf("missing platform: exit %d, %s", code, errOut)
	}
}
