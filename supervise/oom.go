package supervise

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

// The reason OOMKilled, as the container runtime gives it: containerd
// marks a container OOMKilled as soon as its cgroup's oom_kill counter
// moves, whichever of its processes the kernel's OOM killer picked (the
// init process, a child, an exec'd process), and never clears the mark
// for the rest of the container's life; the kubelet passes the reason on
// (toKubeContainerStatus, pkg/kubelet/kuberuntime/kuberuntime_container.go
// :761-762, v1.37.2). The container's cgroup v2 memory.events, or on
// cgroup v1 its memory.oom_control (Linux 4.13 and later), holds that
// counter (oom_kill). The supervisor reads it at every start of the
// workload and at every exit that nothing of the supervisor's caused: a
// higher count makes the run OOMKilled, whatever its exit status.
//
// Runs share one container, so the runtime's mark outlives the run it
// came from: after an OOM kill in any run, the container ends OOMKilled
// even if its last run exits 0 (containerOOMKilled). For a regular
// container that is only the reason shown; an init container in that
// state has failed for the kubelet whatever its exit code
// (isInitContainerFailed, pkg/kubelet/kuberuntime/helpers.go:167-182), so
// the supervisor does not restart it in place after an OOM kill (act).
//
// This only sees kills the supervisor survives: with memory.oom.group=1,
// which the kubelet sets on cgroup v2 unless singleProcessOOMKill is true
// (docs/supervisor.md), the kernel kills every process of the container,
// the supervisor with it, and the kubelet itself reports OOMKilled.

// ReasonOOMKilled is Exit.Reason for an out-of-memory kill.
const ReasonOOMKilled = "OOMKilled"

// maxMemoryEvents bounds the read of memory.events or memory.oom_control:
// a few short lines.
const maxMemoryEvents = 4 << 10

// oomKills returns the oom_kill counter of the memory.events (v2) or
// memory.oom_control (v1) file at path, both "key value" lines,
// and false when there is no path or the file cannot be read or parsed.
func oomKills(path string) (uint64, bool) {
	if path == "" {
		return 0, false
	}
	data, err := boundedfile.Read(path, "the cgroup's OOM counter", maxMemoryEvents, false)
	if err != nil {
		return 0, false
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// oomBaseline is the oom_kill counter read at the start of a run, and at
// the first start, the container's; ok (firstOK) is false when it could
// not be read, and no exit (no container) is then called OOMKilled.
type oomBaseline struct {
	count   uint64
	ok      bool
	first   uint64
	firstOK bool
	read    bool // first has been read
}

// readOOMBaseline reads the counter at the start of a run.
func (s *supervisor) readOOMBaseline() {
	s.oom.count, s.oom.ok = oomKills(s.o.MemoryEvents)
	if !s.oom.read {
		s.oom.first, s.oom.firstOK, s.oom.read = s.oom.count, s.oom.ok, true
	}
}

// oomReason is the reason of a run that has ended, given the oom_kill
// counter read at its start: OOMKilled when the counter has moved since.
func (s *supervisor) oomReason() string {
	if !s.oom.ok {
		return ""
	}
	if n, ok := oomKills(s.o.MemoryEvents); ok && n > s.oom.count {
		return ReasonOOMKilled
	}
	return ""
}

// containerOOMKilled reports whether the OOM killer has killed anything in
// the container since its first run started: the runtime then reports it
// OOMKilled when it ends, whatever its last run does.
func (s *supervisor) containerOOMKilled() bool {
	if !s.oom.firstOK {
		return false
	}
	n, ok := oomKills(s.o.MemoryEvents)
	return ok && n > s.oom.first
}

// ContainerMemoryEvents returns the file that counts the OOM killer's kills
// in the cgroup this process is in, or "" when there is none (no memory
// controller, or a kernel older than 4.13 on cgroup v1).
//
// cgroup v2: memory.events of the path /proc/self/cgroup names ("0::/path",
// relative to the cgroup2 mount at /sys/fs/cgroup, which a container's
// cgroup namespace roots at its own cgroup).
//
// cgroup v1: memory.oom_control of the memory hierarchy's line
// ("N:memory:/path"). A container on v1 usually shares the host's cgroup
// namespace, so the path is the host's, while the runtime mounts only the
// container's own cgroup at /sys/fs/cgroup/memory (runc's v1 mounts): the
// file at the mount's top is then the container's. The named path is tried
// first, so a process outside a container (a test, a docker run with a
// private cgroup namespace) reads its own cgroup's.
func ContainerMemoryEvents() string {
	return memoryEventsOf("/proc/self/cgroup", "/sys/fs/cgroup")
}

func memoryEventsOf(procCgroup, root string) string {
	var v2 string
	var v1 []string
	eachCgroup(procCgroup, func(unified bool, controllers []byte, dir string) {
		switch {
		case unified:
			if p := root + dir + "/memory.events"; v2 == "" {
				if _, ok := oomKills(p); ok {
					v2 = p
				}
			}
		case hasController(controllers, "memory"):
			v1 = append(v1, root+"/memory"+dir+"/memory.oom_control", root+"/memory/memory.oom_control")
		}
	})
	if v2 != "" {
		return v2
	}
	for _, p := range v1 {
		if _, ok := oomKills(p); ok {
			return p
		}
	}
	return ""
}

// eachCgroup calls f for each line of procCgroup (/proc/self/cgroup,
// "hierarchy-ID:controller-list:path", cgroups(7)) whose path is absolute
// and does not climb: unified for cgroup v2's "0::" line, else the v1
// hierarchy's controllers, and the path without a trailing slash.
func eachCgroup(procCgroup string, f func(unified bool, controllers []byte, dir string)) {
	data, err := boundedfile.Read(procCgroup, "cgroup membership", maxMemoryEvents, false)
	if err != nil {
		return
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		fields := bytes.SplitN(line, []byte(":"), 3)
		if len(fields) != 3 {
			continue
		}
		rel := fields[2]
		if !bytes.HasPrefix(rel, []byte("/")) || bytes.Contains(rel, []byte("/..")) {
			continue
		}
		f(string(fields[0]) == "0" && len(fields[1]) == 0, fields[1], strings.TrimSuffix(string(rel), "/"))
	}
}

// hasController reports whether a /proc/self/cgroup controller list
// ("cpu,cpuacct") names c.
func hasController(list []byte, c string) bool {
	for _, name := range bytes.Split(list, []byte(",")) {
		if string(name) == c {
			return true
		}
	}
	return false
}
