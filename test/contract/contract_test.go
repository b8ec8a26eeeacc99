// Package contract_test runs the real supervisor binary exactly as the
// injector wires it into a pod, so that a name the injector writes and the
// supervisor does not read (or reads under another name) fails here rather
// than in a cluster. The kubelet's part is emulated: volumes become
// temporary directories at their mount paths, $(VAR) references are
// expanded, and args follow command. The test sets the workload (a shell
// script instead of the golden pod's python) before injecting; what the
// injector writes is used as written, so the test also holds for any value
// the contract package may take in the future.
//
// It needs no daemon: only `go build`, sh and a temporary directory.
package contract_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// versionVar is the symbol every build stamps; building with it here
// proves that the supervisor reports the variable the injector records.
const versionVar = "github.com/restart-supervisor/restart-supervisor/contract.Version"

const testVersion = "v0.0.0-contract"

// build compiles pkg into dir with ldflags and returns the binary's path.
func build(t *testing.T, dir, pkg, ldflags string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-ldflags="+ldflags, "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// goldenPod reads the Pod of a golden input of the injector.
func goldenPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "injector", "testdata", "in", name))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(data), "\n---\n")
	var pod corev1.Pod
	if err := yaml.Unmarshal([]byte(first), &pod); err != nil || pod.Kind != "Pod" {
		t.Fatalf("%s: first document is not a Pod: %v", name, err)
	}
	return &pod
}

// node stands in for the kubelet and the container runtime: one host
// directory per pod volume, and the image filesystem of the supervisor
// image, which holds only contract.ImageBinaryPath.
type node struct {
	t       *testing.T
	root    string
	volumes map[string]string // pod volume name -> host directory
	image   string            // the supervisor image's binary on the host
	// annotations of the pod, which a fieldRef of an env var reads
	annotations map[string]string
}

func newNode(t *testing.T, pod *corev1.Pod, supervisorBuild string) *node {
	n := &node{t: t, root: t.TempDir(), volumes: map[string]string{}, image: supervisorBuild, annotations: pod.Annotations}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(n.root, "volumes", v.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.volumes[v.Name] = dir
	}
	return n
}

// mounts maps the in-container paths of c to host paths: its volume mounts
// and, as the kubelet mounts it, its termination message file.
func (n *node) mounts(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, vm := range c.VolumeMounts {
		host, ok := n.volumes[vm.Name]
		if !ok {
			n.t.Fatalf("container %q mounts volume %q, which the pod does not have", c.Name, vm.Name)
		}
		m[vm.MountPath] = host
	}
	if p := c.TerminationMessagePath; p != "" {
		host := filepath.Join(n.root, "termination", c.Name)
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			n.t.Fatal(err)
		}
		if err := os.WriteFile(host, nil, 0o644); err != nil {
			n.t.Fatal(err)
		}
		m[p] = host
	}
	return m
}

// hostPath turns an in-container path under one of mounts into the host
// path; other strings are returned as they are.
func hostPath(mounts map[string]string, s string) string {
	best := ""
	for p := range mounts {
		if (s == p || strings.HasPrefix(s, p+"/")) && len(p) > len(best) {
			best = p
		}
	}
	if best == "" {
		return s
	}
	return mounts[best] + s[len(best):]
}

// process is what the container runtime would start for c: argv and
// environment after the kubelet's expansion, with container paths mapped
// to the host.
func (n *node) process(c *corev1.Container) (argv, env []string, mounts map[string]string) {
	mounts = n.mounts(c)
	vars := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			// The kubelet's downward API for the one form the injector
			// writes: a pod annotation (pkg/fieldpath
			// ExtractFieldPathAsString, Kubernetes v1.37.2), "" when
			// the annotation is missing, and never $(VAR)-expanded.
			key, ok := annotationField(e.ValueFrom)
			if !ok {
				n.t.Fatalf("container %q: env %s uses a valueFrom this test does not emulate", c.Name, e.Name)
			}
			vars[e.Name] = n.annotations[key]
			env = append(env, e.Name+"="+vars[e.Name])
			continue
		}
		vars[e.Name] = expand(e.Value, vars)
		env = append(env, e.Name+"="+hostPath(mounts, vars[e.Name]))
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		argv = append(argv, hostPath(mounts, expand(a, vars)))
	}
	if len(argv) > 0 && argv[0] == contract.ImageBinaryPath {
		argv[0] = n.image
	}
	// The image's PATH, so that the workload finds sh; nothing else of the
	// test's environment leaks in.
	env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return argv, env, mounts
}

// annotationField returns the key of a fieldRef to
// metadata.annotations['key'].
func annotationField(src *corev1.EnvVarSource) (string, bool) {
	if src.FieldRef == nil || src.ConfigMapKeyRef != nil || src.SecretKeyRef != nil || src.ResourceFieldRef != nil {
		return "", false
	}
	rest, ok := strings.CutPrefix(src.FieldRef.FieldPath, "metadata.annotations['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// expand applies the kubelet's $(VAR) expansion: "$$" is "$", $(NAME) of a
// defined variable its value, anything else stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func findContainer(t *testing.T, list []corev1.Container, name string) *corev1.Container {
	t.Helper()
	for i := range list {
		if list[i].Name == name {
			return &list[i]
		}
	}
	t.Fatalf("no container %q", name)
	return nil
}

func envValue(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("container %q: the injector did not set %s", c.Name, name)
	return ""
}

func run(t *testing.T, argv, env []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = t.TempDir()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within a minute:\n%s", argv, out.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return 0, out.String()
}

// TestInjectedPodRestartsInPlace injects the golden pod-native.yaml (a
// KEP-5307 pod: restartPolicy Never, Restart on exit 42 or 43), installs
// the supervisor the way the injected init container does, and runs the
// wrapped container with the command, args, environment and mounts the
// injector wrote. The workload exits 42 once, then 0: the supervisor must
// restart it in place, exit 0, and leave its status document and
// termination message where the injected mounts put them.
func TestInjectedPodRestartsInPlace(t *testing.T) {
	supervisor := build(t, t.TempDir(), "github.com/restart-supervisor/restart-supervisor/cmd/restart-supervisor",
		"-X "+versionVar+"="+testVersion)

	pod := goldenPod(t, "pod-native.yaml")
	const name = "trainer"
	work := t.TempDir()
	// The workload replaces python; args stay, so the test also sees them
	// arrive after the command, as the kubelet appends them.
	script := `echo "$0 $1" >> ` + work + `/runs; [ -e ` + work + `/ran ] && exit 0; : > ` + work + `/ran; exit 42`
	findContainer(t, pod.Spec.Containers, name).Command = []string{"sh", "-c", script}

	res, err := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:contract"}).
		MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Injected || !slices.Contains(res.Containers, name) {
		t.Fatalf("injector did not wrap %q: %+v", name, res)
	}
	out := res.Pod
	n := newNode(t, out, supervisor)

	// The init container fills the binary volume from the image.
	install := findContainer(t, out.Spec.InitContainers, contract.InstallContainer)
	argv, env, _ := n.process(install)
	if code, log := run(t, argv, env); code != 0 {
		t.Fatalf("install container exited %d:\n%s", code, log)
	}

	c := findContainer(t, out.Spec.Containers, name)
	argv, env, mounts := n.process(c)
	// The state directory variable must name where the state volume is
	// mounted; checked before the run, which would otherwise write to the
	// host's own path.
	stateDir := envValue(t, c, contract.EnvStateDir)
	host := hostPath(mounts, stateDir)
	if host == stateDir {
		t.Fatalf("%s=%s is not a mount of container %q", contract.EnvStateDir, stateDir, name)
	}
	// The container's terminationMessagePath (a file the kubelet mounts)
	// must be passed on; without it the supervisor would write to the
	// host's own /dev/termination-log.
	if i := slices.Index(c.Command, "--termination-message-path"); i < 0 || i+1 == len(c.Command) ||
		c.Command[i+1] != c.TerminationMessagePath {
		t.Fatalf("command %q does not pass on terminationMessagePath %s", c.Command, c.TerminationMessagePath)
	}
	code, log := run(t, argv, env)
	t.Logf("supervisor output:\n%s", log)
	if code != 0 {
		t.Fatalf("supervisor exited %d, want 0 (the workload's final status)", code)
	}

	runs, err := os.ReadFile(filepath.Join(work, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(runs), "--epochs 10\n--epochs 10\n"; got != want {
		t.Errorf("workload runs (args after command, one line per start) = %q, want %q", got, want)
	}

	// The status document, in the state volume.
	statusFile := filepath.Join(host, contract.StatusDir, envValue(t, c, contract.EnvContainerName)+contract.StatusExt)
	data, err := os.ReadFile(statusFile)
	if err != nil {
		t.Fatalf("status document: %v", err)
	}
	var st statevol.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("status document %s: %v", data, err)
	}
	if st.Container != name || st.State != contract.PhaseExited || st.Restarts != 1 || st.SupervisorVersion != testVersion {
		t.Errorf("status: container %q state %q restarts %d version %q; want %q %q 1 %q",
			st.Container, st.State, st.Restarts, st.SupervisorVersion, name, contract.PhaseExited, testVersion)
	}
	if r := st.LastRestart; r == nil || r.Code != 42 || r.Rule == nil || *r.Rule != 0 || r.Action != "Restart" {
		t.Errorf("status lastRestart = %+v, want exit 42 by rule 0 (Restart)", r)
	}
	if e := st.LastExit; e == nil || e.Code != 0 {
		t.Errorf("status lastExit = %+v, want exit 0", e)
	}

	// `restart-supervisor status`, run in the same container, finds it
	// through the environment alone.
	installed := hostPath(mounts, contract.SupervisorPath)
	code, js := run(t, []string{installed, "status", "--json"}, env)
	if code != 0 || !strings.Contains(js, `"container": "trainer"`) {
		t.Errorf("restart-supervisor status --json in the container: exit %d\n%s", code, js)
	}

	// The kubelet reads the termination message from the container's
	// terminationMessagePath, which the injector passed on.
	term, err := os.ReadFile(hostPath(mounts, c.TerminationMessagePath))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^restart-supervisor: 1 in-place restart; last exit 42 .*; final exit 0`).Match(term) {
		t.Errorf("termination message = %q", term)
	}
}

// TestBuildsStampOneVersion builds both binaries with the Makefile's
// LDFLAGS and checks that both report the version given, and that both
// Dockerfiles stamp the same variable.
func TestBuildsStampOneVersion(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:?=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no LDFLAGS")
	}
	ldflags := strings.ReplaceAll(string(m[1]), "$(VERSION)", testVersion)
	if !strings.Contains(ldflags, "-X "+versionVar+"="+testVersion) {
		t.Errorf("Makefile LDFLAGS %q do not set %s", m[1], versionVar)
	}
	for _, df := range []string{"Dockerfile.supervisor", "Dockerfile.injector"} {
		b, err := os.ReadFile(filepath.Join("..", "..", df))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ARG VERSION")) || !bytes.Contains(b, []byte("-X "+versionVar+"=$VERSION")) {
			t.Errorf("%s does not stamp %s from the VERSION build argument", df, versionVar)
		}
	}

	dir := t.TempDir()
	for _, bin := range []string{"restart-supervisor", "restart-injector"} {
		path := build(t, dir, "github.com/restart-supervisor/restart-supervisor/cmd/"+bin, ldflags)
		code, out := run(t, []string{path, "version"}, nil)
		if code != 0 || !strings.HasPrefix(out, bin+" "+testVersion+" ") {
			t.Errorf("%s version: exit %d, %q; want it to start with %q", bin, code, out, bin+" "+testVersion+" ")
		}
	}
}

// TestInjectedPodRestartsTogether injects the golden restart-all.yaml (a
// sidecar, the watcher with a RestartAllContainers rule and two regular
// containers without rules) and runs every wrapped container at once, as
// the kubelet would, with what the injector wrote: the member list it
// passes must be read by every supervisor, so that the watcher's exit 88
// restarts each container once, and the sidecar before the regular
// containers.
func TestInjectedPodRestartsTogether(t *testing.T) {
	supervisor := build(t, t.TempDir(), "github.com/restart-supervisor/restart-supervisor/cmd/restart-supervisor",
		"-X "+versionVar+"="+testVersion)
	pod := goldenPod(t, "restart-all.yaml")
	work := t.TempDir()
	wait := `exec sleep 60`
	findContainer(t, pod.Spec.InitContainers, "proxy").Command = []string{"sh", "-c", wait}
	for _, name := range []string{"worker", "helper"} {
		findContainer(t, pod.Spec.Containers, name).Command = []string{"sh", "-c", wait}
	}
	findContainer(t, pod.Spec.Containers, "watcher").Command = []string{"sh", "-c",
		`[ -e ` + work + `/fired ] && exec sleep 60; while [ ! -e ` + work + `/go ]; do sleep 0.02; done; : > ` + work + `/fired; exit 88`}
	res, err := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:contract"}).
		MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Pod
	n := newNode(t, out, supervisor)
	argv, env, _ := n.process(findContainer(t, out.Spec.InitContainers, contract.InstallContainer))
	if code, log := run(t, argv, env); code != 0 {
		t.Fatalf("install container exited %d:\n%s", code, log)
	}
	members := []*corev1.Container{findContainer(t, out.Spec.InitContainers, "proxy")}
	for _, name := range []string{"watcher", "worker", "helper"} {
		members = append(members, findContainer(t, out.Spec.Containers, name))
	}
	var host string
	for _, c := range members {
		// fetch-rerun, the re-run sidecar of the init container, is
		// listed but not run here: a member without a status document is
		// not waited for.
		argv, env, mounts := n.process(c)
		want := contract.EnvPodMembers + "=fetch-rerun:init,proxy:sidecar,watcher:regular,worker:regular,helper:regular"
		if !slices.Contains(env, want) {
			t.Errorf("container %q: want %s in its environment, have %q", c.Name, want, env)
		}
		host = hostPath(mounts, envValue(t, c, contract.EnvStateDir))
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		// A workload left by a supervisor killed on a failure must not
		// hold the test on the output pipe.
		cmd.WaitDelay = time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", c.Name, log.String())
			}
		})
	}
	status := func(name string) statevol.Status {
		var st statevol.Status
		data, _ := os.ReadFile(filepath.Join(host, contract.StatusDir, name+contract.StatusExt))
		json.Unmarshal(data, &st)
		return st
	}
	settled := func(restarts int) bool {
		for _, c := range members {
			if st := status(c.Name); st.State != contract.PhaseRunning || st.PodRestarts != restarts || st.StartedAt.IsZero() {
				return false
			}
		}
		return true
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitUntil("every container running", func() bool { return settled(0) })
	os.WriteFile(filepath.Join(work, "go"), nil, 0o644)
	waitUntil("every container restarted once", func() bool { return settled(1) })
	time.Sleep(300 * time.Millisecond)
	proxy := status("proxy")
	for _, c := range members[1:] {
		st := status(c.Name)
		if st.Restarts != 1 || st.Generation != 1 {
			t.Errorf("%s: %d restarts, generation %d; want 1, 1", c.Name, st.Restarts, st.Generation)
		}
		if st.StartedAt.Before(proxy.StartedAt) {
			t.Errorf("%s started at %s, before the sidecar at %s", c.Name, st.StartedAt, proxy.StartedAt)
		}
	}
}
