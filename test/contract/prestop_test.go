package contract_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/injector"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// TestInjectedPreStopEndsRestarts injects the golden lifecycle.yaml, whose
// web container restarts on every exit (restartPolicy Always, Restart on
// 1) and whose preStop hook makes the workload quit (`nginx -s quit`;
// here a file the workload waits for), runs the wrapped container as the
// injector wrote it, and then the preStop hook the injector wrote, as the
// kubelet runs it when the pod is deleted: the workload exits 1 during the
// hook and must not be restarted (upstream restarts no container of a pod
// marked for deletion), and the supervisor exits with the workload's
// status before any stop signal.
func TestInjectedPreStopEndsRestarts(t *testing.T) {
	dir := t.TempDir()
	supervisor := build(t, dir, "github.com/restart-supervisor/restart-supervisor/cmd/restart-supervisor", "")
	build(t, dir, "github.com/restart-supervisor/restart-supervisor/cmd/restart-probe", "")

	pod := goldenPod(t, "lifecycle.yaml")
	c := findContainer(t, pod.Spec.Containers, "web")
	work := t.TempDir()
	c.Command = []string{"sh", "-c", `cd ` + work + `; echo run >> runs; while [ ! -e quit ]; do sleep 0.01; done; exit 1`}
	c.Lifecycle.PreStop.Exec.Command = []string{"sh", "-c", "echo hook >> " + work + "/hooks; : > " + work + "/quit"}

	res, err := injector.New(injector.Options{SupervisorImage: "registry.test/restart-supervisor:contract"}).
		MutatePod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	out := res.Pod
	wc := findContainer(t, out.Spec.Containers, "web")
	if wc.Lifecycle == nil || wc.Lifecycle.PreStop == nil || wc.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("wrapped container's lifecycle %+v: want an exec preStop", wc.Lifecycle)
	}
	n := newNode(t, out, supervisor)
	argv, env, _ := n.process(findContainer(t, out.Spec.InitContainers, contract.InstallContainer))
	if code, log := run(t, argv, env); code != 0 {
		t.Fatalf("install container exited %d:\n%s", code, log)
	}
	argv, env, mounts := n.process(wc)
	hook := append([]string(nil), wc.Lifecycle.PreStop.Exec.Command...)
	hook[0] = hostPath(mounts, hook[0])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	doc := hostPath(mounts, statevol.StatusPath(contract.StateDir, "web"))
	for {
		var st struct{ State string }
		if b, err := os.ReadFile(doc); err == nil && json.Unmarshal(b, &st) == nil && st.State == "running" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no running status document at %s:\n%s", doc, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, hookLog := run(t, hook, env); code != 0 {
		t.Fatalf("preStop hook exited %d:\n%s", code, hookLog)
	}
	err = cmd.Wait()
	t.Logf("supervisor output:\n%s", log.String())
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("supervisor: %v, want exit status 1 (the workload's, not restarted)", err)
	}
	runs, _ := os.ReadFile(filepath.Join(work, "runs"))
	hooks, _ := os.ReadFile(filepath.Join(work, "hooks"))
	if strings.Count(string(runs), "run") != 1 || strings.Count(string(hooks), "hook") != 1 {
		t.Fatalf("runs %q, hooks %q: want one of each", runs, hooks)
	}
	if !strings.Contains(log.String(), "the kubelet is stopping the container") {
		t.Fatal("the supervisor did not log the preStop's news")
	}
}
