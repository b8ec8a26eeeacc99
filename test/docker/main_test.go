package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Images the suite builds; fixed names so that a rerun replaces them.
const (
	busyboxImage    = "restart-supervisor-e2e/busybox:test"
	supervisorImage = "restart-supervisor-e2e/supervisor:test"
	containerLabel  = "restart-supervisor-e2e"
)

var env struct {
	skip       string // reason to skip every test, outside CI only
	root       string // repository root
	bin        string // directory holding the built binaries
	supervisor string // host path of the static supervisor binary
	injector   string // host path of restart-injector
}

func TestMain(m *testing.M) {
	if err := setUp(); err != nil {
		// Only a missing engine may skip, and only outside CI; a binary or
		// an image that does not build is a failure everywhere.
		var noEngine *noEngineError
		if !errors.As(err, &noEngine) || os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "test/docker: %v\n", err)
			os.Exit(1)
		}
		env.skip = err.Error()
	}
	code := m.Run()
	if env.skip == "" {
		removeContainers()
	}
	if env.bin != "" {
		os.RemoveAll(env.bin)
	}
	os.Exit(code)
}

// need skips the test (outside CI) when the suite could not be set up.
func need(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skipf("no Docker engine for the end-to-end tests: %s", env.skip)
	}
}

func setUp() error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	env.root = root
	if err := startEngine(root); err != nil {
		return &noEngineError{err}
	}
	env.bin, err = os.MkdirTemp("", "restart-supervisor-docker-e2e-")
	if err != nil {
		return err
	}
	env.supervisor = filepath.Join(env.bin, "restart-supervisor")
	env.injector = filepath.Join(env.bin, "restart-injector")
	// The supervisor is bind-mounted into images, so it is built static, as
	// the release build is. The injector runs on the host only; built with
	// the default flags it reuses the build cache of go vet and go test
	// instead of compiling the Kubernetes client packages once more.
	builds := []struct {
		pkg, out string
		flags    []string
		env      []string
	}{
		{"./cmd/restart-supervisor", env.supervisor, []string{"-trimpath", "-ldflags=-s -w"}, []string{"CGO_ENABLED=0"}},
		{"./cmd/restart-injector", env.injector, nil, nil},
	}
	for _, b := range builds {
		cmd := exec.Command("go", append(append([]string{"build"}, b.flags...), "-o", b.out, b.pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	if err := importBusybox(); err != nil {
		return err
	}
	return buildSupervisorImage()
}

// noEngineError means no Docker engine could be reached or started.
type noEngineError struct{ err error }

func (e *noEngineError) Error() string { return e.err.Error() }

// startEngine makes sure a Docker engine answers, starting one with
// setup.sh (which installs docker.io when missing) if not.
func startEngine(root string) error {
	if exec.Command("docker", "info").Run() == nil {
		// setup.sh also installs docker-compose, for compose_test.go.
		if _, err := exec.LookPath("docker-compose"); err == nil || os.Geteuid() != 0 {
			return nil
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("no engine answers `docker info` and starting one needs root")
	}
	cmd := exec.Command("bash", filepath.Join(root, "test/docker/setup.sh"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("test/docker/setup.sh could not start an engine: %v\n%s", err, out)
	}
	return nil
}

// importBusybox imports a rootfs made of Debian's static busybox and a
// symlink per applet: a complete image without a registry.
func importBusybox() error {
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox-static is needed for the test image: %v", err)
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dir := func(name string, mode int64) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	file := func(name string, mode int64, data []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now})
		tw.Write(data)
	}
	for _, d := range []string{"bin", "etc", "dev", "proc", "sys", "root", "usr", "usr/bin", "var", "opt"} {
		dir(d, 0o755)
	}
	dir("tmp", 0o1777)
	file("bin/busybox", 0o755, busybox)
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/tmp:/bin/sh\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now})
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cmd := exec.Command("docker", "import", "--change", `CMD ["/bin/sh"]`, "-", busyboxImage)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %v\n%s", err, out)
	}
	return nil
}

// buildSupervisorImage builds the `prebuilt` target of Dockerfile.supervisor
// from the static binary: the same final stage as the release image,
// without the golang stage that needs a registry.
func buildSupervisorImage() error {
	ctxDir := filepath.Join(env.bin, "context")
	if err := os.MkdirAll(ctxDir, 0o755); err != nil {
		return err
	}
	if err := copyFile(env.supervisor, filepath.Join(ctxDir, "restart-supervisor")); err != nil {
		return err
	}
	probe := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(ctxDir, "restart-probe"), "./cmd/restart-probe")
	probe.Dir = env.root
	probe.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := probe.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/restart-probe: %v\n%s", err, out)
	}
	out, err := dockerBuild(filepath.Join(env.root, "Dockerfile.supervisor"), ctxDir, "--target", "prebuilt", "-t", supervisorImage)
	if err != nil {
		return fmt.Errorf("docker build --target prebuilt: %v\n%s", err, out)
	}
	return nil
}

// dockerBuild uses the classic builder: this engine has no registry to load
// BuildKit's frontend from, and the classic builder resolves COPY --from
// and FROM against local images only.
func dockerBuild(dockerfile, ctxDir string, args ...string) (string, error) {
	cmd := exec.Command("docker", append([]string{"build", "-q", "-f", dockerfile}, append(args, ctxDir)...)...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o755)
}

func removeContainers() {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+containerLabel).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

// run runs docker and returns its trimmed stdout; a failure fails the test.
func run(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := try(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return stdout
}

// try runs docker with a generous deadline and returns trimmed stdout and
// stderr.
func try(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()), err
}

var nameSafe = regexp.MustCompile(`[^a-z0-9_.-]+`)

// startContainer runs `docker run -d` with a unique name and the suite's
// label and removes the container when the test ends.
func startContainer(t *testing.T, args ...string) string {
	t.Helper()
	name := fmt.Sprintf("rs-e2e-%s-%d", nameSafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), time.Now().UnixNano()%1e6)
	t.Cleanup(func() {
		if t.Failed() {
			logs, errs, _ := try("logs", name)
			t.Logf("docker logs %s:\n%s\n%s", name, logs, errs)
		}
		exec.Command("docker", "rm", "-f", name).Run()
	})
	run(t, append([]string{"run", "-d", "--name", name, "--label", containerLabel}, args...)...)
	return name
}

// dockerArgs asks `restart-injector docker-args` for the arguments that run
// image under the bind-mounted supervisor with the given rules; cmd, when
// not nil, replaces the image's CMD.
func dockerArgs(t *testing.T, image, rulesDoc string, cmd ...string) []string {
	t.Helper()
	return dockerArgsWith(t, nil, image, rulesDoc, cmd...)
}

// dockerArgsWith is dockerArgs with extra docker-args flags.
func dockerArgsWith(t *testing.T, flags []string, image, rulesDoc string, cmd ...string) []string {
	t.Helper()
	args := append([]string{"docker-args", image, "--supervisor", env.supervisor, "--format", "json"}, flags...)
	if rulesDoc != "" {
		f := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(f, []byte(rulesDoc), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--rules", f)
	}
	if cmd != nil {
		args = append(append(args, "--"), cmd...)
	}
	out, err := exec.Command(env.injector, args...).Output()
	if err != nil {
		t.Fatalf("restart-injector %s: %v\n%s", strings.Join(args, " "), err, stderrOf(err))
	}
	var argv []string
	if err := json.Unmarshal(out, &argv); err != nil {
		t.Fatalf("docker-args printed %q: %v", out, err)
	}
	return argv
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// logs returns the container's stdout and stderr, interleaved.
func logs(t *testing.T, c string) string {
	t.Helper()
	out, err := exec.Command("docker", "logs", c).CombinedOutput()
	if err != nil {
		t.Fatalf("docker logs %s: %v\n%s", c, err, out)
	}
	return string(out)
}

// waitLog polls the container's log until it holds want.
func waitLog(t *testing.T, c, want string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := logs(t, c)
		if strings.Contains(l, want) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s: %q not in its log after %v; log:\n%s", c, want, timeout, l)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// state is the part of `docker inspect` the tests look at.
type state struct {
	RestartCount int
	State        struct {
		Status    string
		Running   bool
		Pid       int
		ExitCode  int
		OOMKilled bool
		StartedAt string
	}
}

func inspect(t *testing.T, c string) state {
	t.Helper()
	var s []state
	if err := json.Unmarshal([]byte(run(t, "inspect", c)), &s); err != nil || len(s) != 1 {
		t.Fatalf("docker inspect %s: %v", c, err)
	}
	return s[0]
}

// waitExit waits for the container to exit and returns its exit code.
func waitExit(t *testing.T, c string, timeout time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "wait", c).Output()
	if err != nil {
		t.Fatalf("container %s did not exit within %v: %v", c, timeout, err)
	}
	var code int
	if _, err := fmt.Sscan(string(out), &code); err != nil {
		t.Fatalf("docker wait %s printed %q", c, out)
	}
	return code
}

// dockerExec runs a command inside the container and returns its output.
func dockerExec(t *testing.T, c string, cmd ...string) string {
	t.Helper()
	return run(t, append([]string{"exec", c}, cmd...)...)
}
