package main

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

const pinnedDigest = "@sha256:df679756d8531a62a1ee654504d4c84443c21bf6401891fa6c20d8a6fe818bf5"

// inject warns, in one line on stderr and with exit 0, when the supervisor
// image it writes is a development build's tag, latest or untagged, and
// not when it is pinned by digest or carries a release tag.
func TestInjectWarnsOfUnpinnedSupervisorImage(t *testing.T) {
	in := []byte(deployYAML)
	for image, warn := range map[string]bool{
		"registry.example.com/rs:9df1e34":            true,
		"registry.example.com/rs:9df1e34-dirty":      true,
		"registry.example.com/rs:v0.1.0-2-g3339aef":  true,
		"registry.example.com/rs:dev":                true,
		"registry.example.com/rs:latest":             true,
		"registry.example.com/rs":                    true,
		"registry.example.com/rs" + pinnedDigest:     false,
		"registry.example.com/rs:dev" + pinnedDigest: false,
		"registry.example.com/rs:v0.1.0":             false,
		"":                                           false, // the default of an unstamped build: ...:v0.1.0
	} {
		args := []string{"inject", "--no-lookup", "-f", "-"}
		if image != "" {
			args = append(args, "--supervisor-image", image)
		}
		code, out, stderr := runBin(t, in, args...)
		if code != 0 || !strings.Contains(out, "restart-supervisor-install") {
			t.Fatalf("inject %q: exit %d\n%s", image, code, stderr)
		}
		warned := strings.Count(stderr, "warning: supervisor image "+image+" is not pinned")
		if warn && (warned != 1 || !strings.Contains(stderr, "pin it by digest (--supervisor-image REPO@sha256:…)")) ||
			!warn && strings.Contains(stderr, "not pinned") {
			t.Errorf("inject --supervisor-image %q: want warning %v, stderr:\n%s", image, warn, stderr)
		}
	}
}

// A binary stamped with a commit (make build outside a release) injects
// ghcr.io/...:<commit> by default, and says so.
func TestInjectWarnsOfItsOwnDevelopmentDefault(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "restart-injector")
	out, err := exec.Command("go", "build", "-ldflags", "-X "+contractVersionSymbol+"=9df1e34-dirty", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "inject", "--no-lookup", "-f", "-")
	cmd.Stdin = strings.NewReader(deployYAML)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("inject: %v\n%s", err, stderr.String())
	}
	want := "warning: supervisor image ghcr.io/restart-supervisor/restart-supervisor:9df1e34-dirty is not pinned: its tag 9df1e34-dirty names a development build"
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
}

const contractVersionSymbol = "github.com/restart-supervisor/restart-supervisor/contract.Version"

// serve logs one warning before it serves when its supervisor image is
// unpinned, and none when it is pinned. Read up to the "serving" line, so
// no timing is involved.
func TestServeWarnsOfUnpinnedSupervisorImage(t *testing.T) {
	if contract.Version == "" {
		t.Fatal("contract.Version is empty")
	}
	for image, warn := range map[string]bool{
		"registry.example.com/rs:dev":            true,
		"registry.example.com/rs:latest":         true,
		"registry.example.com/rs" + pinnedDigest: false,
		"registry.example.com/rs:v0.1.0":         false,
	} {
		cmd := exec.Command(injectorBinary(t), "serve", "--native=off", "--registry-lookup=false",
			"--cert-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0",
			"--shutdown-delay=0", "--log-format=text", "--supervisor-image", image)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var before []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() && !strings.Contains(sc.Text(), "msg=serving") {
			before = append(before, sc.Text())
		}
		cmd.Process.Signal(syscall.SIGTERM)
		for sc.Scan() {
		}
		cmd.Wait()
		var warned int
		for _, l := range before {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "supervisor image "+image+" is not pinned") {
				warned++
			}
		}
		if warn && warned != 1 || !warn && warned != 0 {
			t.Errorf("serve --supervisor-image %q: %d warnings, want %v; log up to serving:\n%s", image, warned, warn, strings.Join(before, "\n"))
		}
	}
}
