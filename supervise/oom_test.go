package supervise

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOOMKilledReason runs workloads that die of SIGKILL or exit, with a
// memory.events file whose oom_kill counter the workload itself moves, as
// the kernel moves it when its OOM killer picks the workload: only a
// SIGKILL with the counter moved since the run's start is OOMKilled.
func TestOOMKilledReason(t *testing.T) {
	for _, c := range []struct {
		name, script string
		want         string
	}{
		{"SIGKILL, counter moved", `echo "oom 1" > $EV.tmp; echo "oom_kill 4" >> $EV.tmp; mv $EV.tmp $EV; kill -9 $$`, ReasonOOMKilled},
		{"SIGKILL, counter still", `kill -9 $$`, ""},
		{"exit 1, counter moved", `printf 'oom_kill 9\n' > $EV.tmp; mv $EV.tmp $EV; exit 1`, ""},
		{"SIGTERM, counter moved", `printf 'oom_kill 9\n' > $EV.tmp; mv $EV.tmp $EV; kill -15 $$`, ""},
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

// TestMemoryEventsOf finds the memory.events of the cgroup
// /proc/self/cgroup names, and none for a cgroup v1 line, a path that
// climbs out or a file that is not there.
func TestMemoryEventsOf(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "kubepods", "pod1", "c1"), 0o755)
	os.WriteFile(filepath.Join(root, "kubepods", "pod1", "c1", "memory.events"), []byte("oom_kill 0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "memory.events"), []byte("oom_kill 0\n"), 0o644)
	for content, want := range map[string]string{
		"0::/kubepods/pod1/c1\n": filepath.Join(root, "kubepods", "pod1", "c1", "memory.events"),
		"0::/\n":                 filepath.Join(root, "memory.events"),
		"4:memory:/kubepods/pod1/c1\n0::/nowhere\n": "",
		"0::/kubepods/../../etc\n":                  "",
	} {
		pc := filepath.Join(t.TempDir(), "cgroup")
		os.WriteFile(pc, []byte(content), 0o644)
		if got := memoryEventsOf(pc, root); got != want {
			t.Errorf("%q: %q, want %q", content, got, want)
		}
	}
	// The test machine's own: whatever it is, no panic and no hang.
	_ = ContainerMemoryEvents()
}
