package supervise

import (
	"bytes"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

// Telling an out-of-memory kill from any other SIGKILL, as the kubelet
// shows it (reason OOMKilled): the container's cgroup v2 memory.events
// counts the processes the kernel's OOM killer killed in it (oom_kill).
// The supervisor reads the counter at every start of the workload and,
// when a run dies of SIGKILL that nothing of the supervisor's sent, again:
// a higher count means the kernel killed it (or another process of the
// container in the same moment, which the counter cannot tell apart).
//
// This only sees kills the supervisor survives: with memory.oom.group=1,
// which the kubelet sets on cgroup v2 unless singleProcessOOMKill is true
// (docs/supervisor.md), the kernel kills every process of the container,
// the supervisor with it, and the kubelet itself reports OOMKilled.

// ReasonOOMKilled is Exit.Reason for an out-of-memory kill.
const ReasonOOMKilled = "OOMKilled"

// maxMemoryEvents bounds the read of memory.events: six short lines.
const maxMemoryEvents = 4 << 10

// oomKills returns the oom_kill counter of the memory.events file at path,
// and false when there is no path or the file cannot be read or parsed.
func oomKills(path string) (uint64, bool) {
	if path == "" {
		return 0, false
	}
	data, err := boundedfile.Read(path, "memory.events", maxMemoryEvents, false)
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

// oomReason is the reason of a run that ended with st, given the oom_kill
// counter read at its start: OOMKilled when SIGKILL killed it and the
// counter has moved since.
func (s *supervisor) oomReason(st ExitStatus) string {
	if st.Signal != unix.SIGKILL || !s.oomAtStartOK {
		return ""
	}
	if n, ok := oomKills(s.o.MemoryEvents); ok && n > s.oomAtStart {
		return ReasonOOMKilled
	}
	return ""
}

// ContainerMemoryEvents returns the memory.events file of the cgroup v2
// this process is in, as /proc/self/cgroup names it ("0::/path", relative
// to the cgroup2 mount at /sys/fs/cgroup, which a container's cgroup
// namespace roots at its own cgroup), or "" when there is none (cgroup v1,
// or no memory controller).
func ContainerMemoryEvents() string {
	return memoryEventsOf("/proc/self/cgroup", "/sys/fs/cgroup")
}

func memoryEventsOf(procCgroup, root string) string {
	data, err := boundedfile.Read(procCgroup, "cgroup membership", maxMemoryEvents, false)
	if err != nil {
		return ""
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		rel, ok := bytes.CutPrefix(line, []byte("0::"))
		if !ok || !bytes.HasPrefix(rel, []byte("/")) || bytes.Contains(rel, []byte("/..")) {
			continue
		}
		p := root + strings.TrimSuffix(string(rel), "/") + "/memory.events"
		if _, ok := oomKills(p); ok {
			return p
		}
	}
	return ""
}
