package supervise

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOOMKilledReason runs workloads that die of SIGKILL or exit, with a
// memory.events file whose oom_kill counter the workload itself moves, as
// the kernel moves it when its OOM killer picks the workload or any other
// process of the container: a run during which the counter moved is
// OOMKilled, whatever its exit status, as containerd marks the container
// (oom.go).
func TestOOMKilledReason(t *testing.T) {
	for _, c := range []struct {
		name, script string
		want         string
	}{
		{"SIGKILL, counter moved", `echo "oom 1" > $EV.tmp; echo "oom_kill 4" >> $EV.tmp; mv $EV.tmp $EV; kill -9 $$`, ReasonOOMKilled},
		{"SIGKILL, counter still", `kill -9 $$`, ""},
		{"exit 1, counter moved", `printf 'oom_kill 9\n' > $EV.tmp; mv $EV.tmp $EV; exit 1`, ReasonOOMKilled},
		{"SIGTERM, counter moved", `printf 'oom_kill 9\n' > $EV.tmp; mv $EV.tmp $EV; kill -15 $$`, ReasonOOMKilled},
		{"exit 0, counter still", `exit 0`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := filepath.Join(t.TempDir(), "memory.events")
			if err := os.WriteFile(ev, []byte("low 0\nhigh 0\nmax 2\noom 3\noom_kill 3\noom_group_kill 0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			o := shell(c.script)
			o.Env = append(o.Env, "EV="+ev)
			o.MemoryEvents = ev
			var last State
			o.OnChange = func(st State) { last = st }
			waitResult(t, runAsync(o))
			if last.LastExit == nil || last.LastExit.Reason != c.want {
				t.Fatalf("last exit %+v, want reason %q", last.LastExit, c.want)
			}
		})
	}
}

// TestMemoryEventsOf finds the OOM counter of the cgroup
// /proc/self/cgroup names: memory.events on cgroup v2; on v1 the named
// cgroup's memory.oom_control, else the one at the top of the memory
// mount (a container's own, its path being the host's); none for a path
// that climbs out or a file that is not there.
func TestMemoryEventsOf(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "kubepods", "pod1", "c1"), 0o755)
	os.WriteFile(filepath.Join(root, "kubepods", "pod1", "c1", "memory.events"), []byte("oom_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "memory.events"), []byte("oom_kill 0\n"), 0o644)
	v1 := t.TempDir()
	os.MkdirAll(filepath.Join(v1, "memory", "host", "c2"), 0o755)
	os.WriteFile(filepath.Join(v1, "memory", "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(v1, "memory", "host", "c2", "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 0o644)
	for _, c := range []struct{ root, content, want string }{
		{root, "0::/kubepods/pod1/c1\n", filepath.Join(root, "kubepods", "pod1", "c1", "memory.events")},
		{root, "0::/\n", filepath.Join(root, "memory.events")},
		{root, "4:memory:/kubepods/pod1/c1\n0::/nowhere\n", ""},
		{root, "0::/kubepods/../../etc\n", ""},
		// cgroup v1, a container sharing the host's cgroup namespace: its
		// path is not under the mount, whose top is its own cgroup.
		{v1, "5:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n0::/\n", filepath.Join(v1, "memory", "memory.oom_control")},
		// cgroup v1, the whole hierarchy mounted (a host process).
		{v1, "4:memory:/host/c2\n", filepath.Join(v1, "memory", "host", "c2", "memory.oom_control")},
		{v1, "4:memory:/host/../../etc\n", ""},
		{v1, "4:memoryx:/host/c2\n", ""},
	} {
		root, content, want := c.root, c.content, c.want
		pc := filepath.Join(t.TempDir(), "cgroup")
		os.WriteFile(pc, []byte(content), 0o644)
		if got := memoryEventsOf(pc, root); got != want {
			t.Errorf("%q: %q, want %q", content, got, want)
		}
	}
	// The test machine's own: whatever it is, no panic and no hang.
	_ = ContainerMemoryEvents()
}

// TestOOMKilledByTheKernel lets the kernel's OOM killer pick the workload:
// the workload moves itself into a memory cgroup of 32 MiB this test
// creates (cgroup v1 or v2, whichever holds the memory controller here)
// and then reads /dev/zero into memory. The supervisor must call the
// SIGKILL OOMKilled from the cgroup's own counter. It needs root and a
// memory controller it can create a cgroup in; without them it is skipped.
func TestOOMKilledByTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a memory cgroup")
	}
	dir, counter, limit := newMemoryCgroup(t, 32<<20)
	o := shell(fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec tail /dev/zero`, dir))
	o.MemoryEvents = counter
	var last State
	o.OnChange = func(st State) { last = st }
	res := waitResult(t, runAsync(o))
	if last.LastExit == nil || last.LastExit.Signal != syscall.SIGKILL || last.LastExit.Reason != ReasonOOMKilled {
		t.Fatalf("last exit %+v (result %+v), want SIGKILL with reason %s; %s", last.LastExit, res, ReasonOOMKilled, limit)
	}
}

// TestChildOOMKilledByTheKernel: the kernel's OOM killer picks a child of
// the workload, which then exits 0. containerd marks such a container
// OOMKilled, so the run is OOMKilled too.
func TestChildOOMKilledByTheKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a memory cgroup")
	}
	dir, counter, limit := newMemoryCgroup(t, 32<<20)
	o := shell(fmt.Sprintf(`echo $$ > %s/cgroup.procs && { tail /dev/zero; true; }; exit 0`, dir))
	o.MemoryEvents = counter
	var last State
	o.OnChange = func(st State) { last = st }
	res := waitResult(t, runAsync(o))
	if res.Status != 0 || last.LastExit == nil || last.LastExit.Reason != ReasonOOMKilled {
		t.Fatalf("last exit %+v (result %+v), want exit 0 with reason %s; %s", last.LastExit, res, ReasonOOMKilled, limit)
	}
}

// TestInitContainerOOMKilledIsHandedOver: an init container whose rule
// restarts the OOM kill's 137 in place. The runtime would report the
// container OOMKilled after any later run, exit 0 included, and the
// kubelet counts that init container failed: the supervisor hands the
// exit over instead, so that the kubelet's new container initializes it.
// A regular container with the same rule restarts in place.
func TestInitContainerOOMKilledIsHandedOver(t *testing.T) {
	for _, c := range []struct {
		name, init string
		status     int
		restarts   int
		reason     string
	}{
		{"init container", `"initContainer":true,`, 137, 0, ReasonInitContainerOOMKilled},
		{"regular container", ``, 0, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ev := filepath.Join(dir, "memory.events")
			os.WriteFile(ev, []byte("oom 0\noom_kill 0\n"), 0o644)
			o := shell(fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 2 ] && exit 0
printf 'oom 1\noom_kill 1\n' > ev.tmp; mv ev.tmp %s; kill -9 $$`, dir, ev))
			o.MemoryEvents = ev
			o.Config = mustParse(t, `{`+c.init+`"restartPolicy":"Never","podRestartPolicy":"OnFailure",
			  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[137]}}]}`)
			var last State
			o.OnChange = func(st State) { last = st }
			res := waitResult(t, runAsync(o))
			got := ""
			if last.HandOver != nil {
				got = last.HandOver.Reason
			}
			if res.Status != c.status || res.Restarts != c.restarts || got != c.reason {
				t.Fatalf("result %+v, hand-over %q; want status %d after %d restarts, hand-over %q", res, got, c.status, c.restarts, c.reason)
			}
		})
	}
}

// newMemoryCgroup creates a memory cgroup limited to limit bytes and
// removes it at the end of the test; it returns its directory, its OOM
// counter file and a description for messages.
func newMemoryCgroup(t *testing.T, limit int) (dir, counter, desc string) {
	t.Helper()
	name := fmt.Sprintf("restart-supervisor-oom-test-%d", os.Getpid())
	cleanup := func(d string) {
		t.Cleanup(func() {
			// The killed workload may take a moment to leave the cgroup.
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	if v1 := "/sys/fs/cgroup/memory"; exists(v1 + "/memory.limit_in_bytes") {
		d := filepath.Join(v1, name)
		if err := os.Mkdir(d, 0o755); err == nil {
			cleanup(d)
			for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
				if err := os.WriteFile(filepath.Join(d, f), []byte(strconv.Itoa(limit)), 0o644); err != nil && f == "memory.limit_in_bytes" {
					t.Fatalf("cgroup v1 limit: %v", err)
				}
			}
			return d, filepath.Join(d, "memory.oom_control"), "cgroup v1 " + d
		}
	}
	if controllers, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers"); err == nil && bytesHasWord(controllers, "memory") {
		d := filepath.Join("/sys/fs/cgroup", name)
		if err := os.Mkdir(d, 0o755); err == nil {
			cleanup(d)
			for f, v := range map[string]string{"memory.max": strconv.Itoa(limit), "memory.swap.max": "0"} {
				if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil && f == "memory.max" {
					t.Fatalf("cgroup v2 limit: %v", err)
				}
			}
			return d, filepath.Join(d, "memory.events"), "cgroup v2 " + d
		}
	}
	t.Skip("no memory cgroup this test can create (neither /sys/fs/cgroup/memory nor a cgroup2 root with the memory controller)")
	return "", "", ""
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func bytesHasWord(b []byte, w string) bool {
	for _, f := range strings.Fields(string(b)) {
		if f == w {
			return true
		}
	}
	return false
}

// TestResizeStartsAFreshCurve: a workload exits 42 under Restart In [42]
// three times; before its third exit its cgroup's memory limit is lowered
// (raising it on cgroup v1 would first need memory.memsw.limit_in_bytes),
// as the kubelet applies an in-place resize. The kubelet's back-off key
// holds the resources, so the third restart comes at once on a fresh
// curve instead of after the old curve's third step.
func TestResizeStartsAFreshCurve(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a memory cgroup")
	}
	cg, _, desc := newMemoryCgroup(t, 64<<20)
	limit := filepath.Join(cg, "memory.max")
	if strings.HasPrefix(desc, "cgroup v1") {
		limit = filepath.Join(cg, "memory.limit_in_bytes")
	}
	dir := t.TempDir()
	o := shell(fmt.Sprintf(`cd %s; n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n
[ $n -ge 4 ] && exit 0
[ $n -eq 3 ] && echo %d > %s
exit 42`, dir, 48<<20, limit))
	o.ResourceFiles = []string{limit}
	o.Config = mustParse(t, `{"restartPolicy":"Never","podRestartPolicy":"Never","backoff":{"initial":"2s"},
	  "restartPolicyRules":[{"action":"Restart","exitCodes":{"operator":"In","values":[42]}}]}`)
	var log syncBuffer
	o.Log = slog.New(slog.NewTextHandler(&log, nil))
	if r := waitResult(t, runAsync(o)); r.Status != 0 || r.Restarts != 3 {
		t.Fatalf("result %+v, want status 0 after 3 restarts; log:\n%s", r, log.String())
	}
	var delays []string
	for _, l := range strings.Split(log.String(), "\n") {
		if i := strings.Index(l, "delay="); i >= 0 && strings.Contains(l, "restarting in place") {
			delays = append(delays, strings.Fields(l[i+len("delay="):])[0])
		}
	}
	if strings.Join(delays, " ") != "0s 2s 0s" {
		t.Fatalf("delays %v, want 0s 2s 0s (a fresh curve after the resize; %s); log:\n%s", delays, desc, log.String())
	}
}

// TestResourceFilesOf finds the files of the cgroup /proc/self/cgroup
// names that hold the CPU quota and weight and the memory limit: on v2 in
// the unified cgroup's directory, on v1 in each controller's (the named
// path, else the mount's top); none for a path that climbs out.
func TestResourceFilesOf(t *testing.T) {
	root := t.TempDir()
	write := func(p string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("1\n"), 0o644)
	}
	for _, f := range []string{"cpu.max", "cpu.weight", "memory.max"} {
		write(filepath.Join(root, "kubepods", "c1", f))
	}
	write(filepath.Join(root, "memory", "memory.limit_in_bytes"))
	write(filepath.Join(root, "cpu", "host", "c2", "cpu.cfs_quota_us"))
	write(filepath.Join(root, "cpu", "host", "c2", "cpu.shares"))
	for _, c := range []struct{ content, want string }{
		{"0::/kubepods/c1\n", "kubepods/c1/cpu.max kubepods/c1/cpu.weight kubepods/c1/memory.max"},
		{"5:memory:/host/c2\n4:cpu,cpuacct:/host/c2\n", "memory/memory.limit_in_bytes cpu/host/c2/cpu.cfs_quota_us cpu/host/c2/cpu.shares"},
		{"0::/../etc\n", ""},
	} {
		proc := filepath.Join(t.TempDir(), "cgroup")
		os.WriteFile(proc, []byte(c.content), 0o644)
		var got []string
		for _, f := range resourceFilesOf(proc, root) {
			got = append(got, strings.TrimPrefix(f, root+"/"))
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%q: %v, want %s", c.content, got, c.want)
		}
	}
}
