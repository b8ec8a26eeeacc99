package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Down tears down the cluster recorded in dir: pod processes, containerd's
// shims, every process the harness started (checked by executable, so a
// recycled pid is left alone), mounts under dir, the kubelet's kubepods
// cgroups, the sysctls the kubelet changed, and finally dir itself.
// It is safe to call on a half-started or already stopped cluster.
func Down(dir string, log io.Writer) error {
	if dir == "" {
		dir = DefaultDir
	}
	if log == nil {
		log = os.Stderr
	}
	logf := func(format string, a ...any) { fmt.Fprintf(log, "[e2e-cluster] "+format+"\n", a...) }
	var st State
	if b, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s/state.json: %w", dir, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	} else if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	procs := st.Processes
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		switch p.Name {
		case "containerd":
			// Pods first: the kubelet is gone by now, so nothing restarts them.
			killCgroupTree("kubepods")
			killShims(filepath.Join(dir, "containerd"))
		case "containerd-node2":
			killCgroupTree(secondCgroupRoot)
			killShims(filepath.Join(dir, "node2", "containerd"))
		}
		if err := stopProcess(p); err != nil {
			errs = append(errs, err)
		}
	}
	killCgroupTree("kubepods")
	killCgroupTree(secondCgroupRoot)
	killShims(filepath.Join(dir, "containerd"))
	killShims(filepath.Join(dir, "node2", "containerd"))
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeKueueHostDir(); err != nil {
		errs = append(errs, err)
	}
	for _, tree := range []string{"kubepods", secondCgroupRoot} {
		if err := removeCgroupTree(tree); err != nil {
			errs = append(errs, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sysctl.saved.json")); err == nil {
		saved := map[string]string{}
		if json.Unmarshal(b, &saved) == nil {
			for k, v := range saved {
				if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
					errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
				}
			}
		}
	}
	for _, bridge := range []string{"rse2e0", "rse2e1"} {
		if _, err := os.Stat("/sys/class/net/" + bridge); err == nil {
			_ = exec.Command("ip", "link", "delete", bridge).Run()
		}
	}
	if len(errs) == 0 {
		if left := mountsUnder(dir); len(left) > 0 {
			errs = append(errs, fmt.Errorf("mounts left under %s: %v", dir, left))
		} else if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	logf("cluster in %s torn down", dir)
	return nil
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3 is the state; a zombie has already exited.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

func sameExe(p Proc) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	if err != nil {
		return false
	}
	return p.Exe == "" || strings.TrimSuffix(exe, " (deleted)") == strings.TrimSuffix(p.Exe, " (deleted)")
}

// stopProcess sends SIGTERM to the process (and its session's group), then
// SIGKILL after 10 s.
func stopProcess(p Proc) error {
	if p.PID <= 1 || !alive(p.PID) || !sameExe(p) {
		return nil
	}
	_ = syscall.Kill(-p.PID, syscall.SIGTERM)
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !alive(p.PID) {
			return nil
		}
	}
	_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !alive(p.PID) {
			return nil
		}
	}
	return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
}

// cgroupDirs lists /sys/fs/cgroup/<hierarchy>/<name> for every hierarchy
// (cgroup v1 and hybrid), or /sys/fs/cgroup/<name> on a pure v2 host.
func cgroupDirs(name string) []string {
	var out []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", name)); err == nil {
			out = append(out, filepath.Join("/sys/fs/cgroup", name))
		}
		return out
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		d := filepath.Join("/sys/fs/cgroup", e.Name(), name)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// killCgroupTree SIGKILLs every process in the named cgroup subtrees (the
// pods' processes; only the kubelet puts processes there).
func killCgroupTree(name string) {
	for round := 0; round < 50; round++ {
		found := false
		for _, root := range cgroupDirs(name) {
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killShims SIGKILLs containerd shims serving the containerd whose state is
// under dir (recognised by the -address argument pointing into dir).
func killShims(dir string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && strings.HasPrefix(args[i+1], dir+"/") {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unmountUnder(dir string) error {
	for round := 0; round < 5; round++ {
		mps := mountsUnder(dir)
		if len(mps) == 0 {
			return nil
		}
		// Deepest first.
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	if left := mountsUnder(dir); len(left) > 0 {
		return fmt.Errorf("cannot unmount %v", left)
	}
	return nil
}

// makeCgroup creates the named cgroup in every hierarchy (cgroup v1 and
// hybrid), or below /sys/fs/cgroup on a pure v2 host.
func makeCgroup(name string) error {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return os.MkdirAll(filepath.Join("/sys/fs/cgroup", name), 0o755)
	}
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", e.Name(), name), 0o755); err != nil {
			return fmt.Errorf("cgroup %s/%s: %w", e.Name(), name, err)
		}
	}
	return nil
}

// removeCgroupTree removes the named cgroup subtrees bottom-up.
func removeCgroupTree(name string) error {
	var last error
	for round := 0; round < 20; round++ {
		last = nil
		for _, root := range cgroupDirs(name) {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
					last = fmt.Errorf("rmdir %s: %w", dirs[i], err)
				}
			}
		}
		if last == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return last
}

// Leftovers lists what a torn-down cluster must not leave behind: the state
// directory, mounts under it, kubepods cgroups, processes the harness
// started, and sysctls that differ from the values saved at start (saved is
// the content of Dir/sysctl.saved.json, read before Down removed it).
func Leftovers(st State, saved map[string]string) []string {
	var out []string
	if _, err := os.Stat(st.Dir); err == nil {
		out = append(out, "state directory "+st.Dir)
	}
	for _, mp := range mountsUnder(st.Dir) {
		out = append(out, "mount "+mp)
	}
	for _, d := range append(cgroupDirs("kubepods"), cgroupDirs(secondCgroupRoot)...) {
		out = append(out, "cgroup "+d)
	}
	for _, p := range st.Processes {
		if alive(p.PID) && sameExe(p) {
			out = append(out, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	for k, v := range saved {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil && strings.TrimSpace(string(b)) != v {
			out = append(out, fmt.Sprintf("sysctl %s = %s, was %s", k, strings.TrimSpace(string(b)), v))
		}
	}
	return out
}

// SavedSysctls reads the sysctl values saved when the cluster in dir started.
func SavedSysctls(dir string) map[string]string {
	saved := map[string]string{}
	if b, err := os.ReadFile(filepath.Join(dir, "sysctl.saved.json")); err == nil {
		_ = json.Unmarshal(b, &saved)
	}
	return saved
}
