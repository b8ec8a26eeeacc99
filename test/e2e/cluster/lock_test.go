package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A test holding the node lock keeps e2e-cluster up and down off its
// cluster: both end at once with exit 1, naming the lock, and touch
// nothing. Before, `hack/e2e-up.sh` tore down and replaced whatever
// cluster ran in the directory, a running test's included.
func TestManualUpAndDownWaitForNoTest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "e2e")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(dir, "test-cluster-state")
	if err := os.WriteFile(keep, []byte("in use\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := Lock(dir, false); !errors.Is(err, ErrNodeBusy) {
		t.Fatalf("a second lock while held: %v, want ErrNodeBusy", err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "e2e-cluster"), "../cmd/e2e-cluster")
	bin := build.Args[3]
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build e2e-cluster: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"up", "--dir", dir}, {"down", "--dir", dir}} {
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), ".lock is held") {
			t.Errorf("e2e-cluster %s while a test holds the lock: %v\n%s", args[0], err, out)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the test's cluster directory was touched: %v", err)
	}
}

// A cluster brought up by hand is known by its marker while its
// kube-apiserver lives, and not once it is gone or the pid is another
// program's.
func TestManualClusterIsKnownWhileItsAPIServerRuns(t *testing.T) {
	dir := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), "kube-apiserver")
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(path string) *exec.Cmd {
		cmd := exec.Command(path, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	api, other := start(fake), start(sleep)
	if err := MarkManual(&Cluster{State: State{Dir: dir, Processes: []Proc{{Name: "etcd", PID: other.Process.Pid}, {Name: "kube-apiserver", PID: api.Process.Pid}}}}); err != nil {
		t.Fatal(err)
	}
	if pid, running := ManualCluster(dir); !running || pid != api.Process.Pid {
		t.Errorf("while its kube-apiserver runs: pid %d running %v", pid, running)
	}
	if err := os.WriteFile(filepath.Join(dir, manualMarker), []byte(strconv.Itoa(other.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, running := ManualCluster(dir); running {
		t.Error("a marker naming a pid that is no kube-apiserver counts as a running cluster")
	}
	if err := MarkManual(&Cluster{State: State{Dir: dir, Processes: []Proc{{Name: "kube-apiserver", PID: api.Process.Pid}}}}); err != nil {
		t.Fatal(err)
	}
	api.Process.Kill()
	api.Wait()
	if _, running := ManualCluster(dir); running {
		t.Error("a marker of a kube-apiserver that has ended counts as a running cluster")
	}
}
