package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// TestMain removes the binary built for the tests that run the real
// restart-injector.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// injectorBinary builds restart-injector once for the package.
func injectorBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "restart-injector-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "restart-injector")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runBin runs the real binary and returns its exit status, stdout and
// stderr.
func runBin(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(injectorBinary(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// uninjectCorpus are golden inputs that inject without a registry, and
// whose documents come back byte for byte (the library test covers the
// whole corpus).
var uninjectCorpus = []string{"crds.yaml", "pod-native.yaml", "init-sidecar.yaml", "probes.yaml", "list.yaml", "anchors.yaml", "no-rules.yaml", "already-injected.yaml"}

// TestUninjectBinaryRoundTrip: the real binary's inject, then uninject,
// gives back the input files byte for byte: through files and -o, and
// through a pipe between two processes.
func TestUninjectBinaryRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, name := range uninjectCorpus {
		src, err := os.ReadFile(filepath.Join("..", "..", "injector", "testdata", "in", name))
		if err != nil {
			t.Fatal(err)
		}
		in := writeFile(t, filepath.Join(dir, name), string(src))
		injected := filepath.Join(dir, "injected-"+name)
		if code, _, errOut := runBin(t, nil, "inject", "--no-lookup", "-q", "-f", in, "-o", injected); code != exitOK {
			t.Fatalf("inject %s: exit %d: %s", name, code, errOut)
		}
		code, out, errOut := runBin(t, nil, "uninject", "-f", injected)
		if code != exitOK {
			t.Fatalf("uninject %s: exit %d: %s", name, code, errOut)
		}
		if out != string(src) {
			t.Errorf("%s does not come back:\n%s", name, diffLines(string(src), out))
		}
		if name == "already-injected.yaml" && !strings.Contains(errOut, "is wrapped but carries no restart-supervisor.dev/uninject annotation") {
			t.Errorf("%s: no warning for objects wrapped without a record: %q", name, errOut)
		}
		if name == "crds.yaml" && !strings.Contains(errOut, injected+`: JobSet "trainer" uninjected`) {
			t.Errorf("%s: report %q", name, errOut)
		}
	}

	// inject | uninject, two processes and a pipe; several files at once.
	src := filepath.Join("..", "..", "injector", "testdata", "in")
	inject := exec.Command(injectorBinary(t), "inject", "--no-lookup", "-q", "-f", filepath.Join(src, "crds.yaml"), "-f", filepath.Join(src, "pod-native.yaml"))
	uninject := exec.Command(injectorBinary(t), "uninject", "-q", "-f", "-")
	pipe, err := inject.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	uninject.Stdin = pipe
	var out, errb bytes.Buffer
	uninject.Stdout, uninject.Stderr, inject.Stderr = &out, &errb, &errb
	if err := inject.Start(); err != nil {
		t.Fatal(err)
	}
	if err := uninject.Run(); err != nil {
		t.Fatalf("uninject: %v: %s", err, errb.String())
	}
	if err := inject.Wait(); err != nil {
		t.Fatalf("inject: %v: %s", err, errb.String())
	}
	a, _ := os.ReadFile(filepath.Join(src, "crds.yaml"))
	b, _ := os.ReadFile(filepath.Join(src, "pod-native.yaml"))
	if want := string(a) + "---\n" + string(b); out.String() != want {
		t.Errorf("through a pipe:\n%s", diffLines(want, out.String()))
	}
}

// TestUninjectBinaryEditedWrap: a wrap edited by hand fails the run with
// one line naming the file, the line, the object and the field, and
// nothing on stdout; with --continue-on-error the document is written back
// as it is and the others are reverted; -o is left alone on failure.
func TestUninjectBinaryEditedWrap(t *testing.T) {
	dir := t.TempDir()
	orig := strings.ReplaceAll(deployYAML, "IMAGE", "x") + "---\n" + serviceYAML
	f := writeFile(t, filepath.Join(dir, "app.yaml"), orig)
	code, injected, errOut := runBin(t, nil, "inject", "--no-lookup", "-q", "-f", f)
	if code != exitOK {
		t.Fatalf("inject: exit %d: %s", code, errOut)
	}
	edited := strings.Replace(injected, "        - /work\n", "        - /work2\n", 1)
	if edited == injected {
		t.Fatalf("no command to edit:\n%s", injected)
	}
	stream := edited + "---\n" + injected
	g := writeFile(t, filepath.Join(dir, "edited.yaml"), stream)
	code, out, errOut := runBin(t, nil, "uninject", "-f", g)
	want := "restart-injector uninject: " + g + `: line 1: Deployment "worker": spec.template.spec.containers[0].command: changed since restart-injector inject wrote it; restore it, or edit the original manifest and inject it again` + "\n"
	if code != exitFailure || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("exit %d, stdout %q, stderr %q\nwant stderr to start %q", code, out, errOut, want)
	}
	target := writeFile(t, filepath.Join(dir, "out.yaml"), "kept\n")
	if code, _, _ := runBin(t, nil, "uninject", "-f", g, "-o", target); code != exitFailure {
		t.Errorf("-o: exit %d", code)
	}
	if b, _ := os.ReadFile(target); string(b) != "kept\n" {
		t.Errorf("a failed run changed the -o file: %q", b)
	}
	code, out, errOut = runBin(t, nil, "uninject", "--continue-on-error", "-q", "-f", g)
	if code != exitOK || strings.Count(errOut, "warning: left unchanged: ") != 1 {
		t.Fatalf("--continue-on-error: exit %d, stderr %q", code, errOut)
	}
	if want := edited + "---\n" + orig; out != want {
		t.Errorf("--continue-on-error output:\n%s", diffLines(want, out))
	}
	for _, args := range [][]string{{"uninject"}, {"uninject", "-f", g, "extra"}, {"uninject", "--bogus", "-f", g}} {
		if code, _, errOut := runBin(t, nil, args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("first difference at line %d:\n- %q\n+ %q", i+1, x, y)
		}
	}
	return "(identical lines)"
}

// TestInjectWithoutTempDir: with no writable temporary directory (a
// read-only container), the output to stdout is held in memory, and a
// failed run still writes nothing.
func TestInjectWithoutTempDir(t *testing.T) {
	f := writeFile(t, filepath.Join(t.TempDir(), "d.yaml"), strings.ReplaceAll(deployYAML, "IMAGE", "x"))
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
	code, out, errOut := runCmd(t, "", "inject", "--no-lookup", "-q", "-f", f)
	if code != exitOK || !strings.Contains(out, "- /opt/restart-supervisor/restart-supervisor\n") {
		t.Errorf("exit %d, stderr %q\n%s", code, errOut, out)
	}
	bad := writeFile(t, filepath.Join(t.TempDir(), "bad.yaml"), strings.ReplaceAll(strings.ReplaceAll(deployYAML, "IMAGE", "x"), "operator: In", "operator: Maybe")+"---\n"+serviceYAML)
	if code, out, _ := runCmd(t, "", "inject", "--no-lookup", "-q", "-f", bad); code != exitFailure || out != "" {
		t.Errorf("failed run: exit %d, stdout %q", code, out)
	}
}
