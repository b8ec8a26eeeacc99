package supervise

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// statReadLimit bounds what is read of /proc/PID/stat: the parent pid
// comes right after the command name, which the kernel caps at 16 bytes
// (64 for kernel threads), so the first 512 bytes always hold it.
const statReadLimit = 512

// children returns the pids of the supervisor's child processes. It reads
// /proc/self/task/*/children where the kernel offers it
// (CONFIG_PROC_CHILDREN), and otherwise scans /proc for processes whose
// parent is us. ok is false when /proc does not show this process's PID
// namespace (a namespace entered without remounting /proc): its pids would
// be another namespace's, and killing them would hit strangers.
func children() (pids []int, ok bool) {
	self := os.Getpid()
	if link, err := os.Readlink("/proc/self"); err != nil || link != strconv.Itoa(self) {
		return nil, false
	}
	if pids, ok := childrenFiles(); ok {
		return pids, true
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false
	}
	buf := make([]byte, statReadLimit)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if parentOf(filepath.Join("/proc", name, "stat"), buf) == self {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// childrenFiles reads the children lists of all our threads: a child is
// listed under the thread that forked it.
func childrenFiles() ([]int, bool) {
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(tasks) == 0 {
		return nil, false
	}
	var pids []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		for _, field := range bytes.Fields(data) {
			if pid, err := strconv.Atoi(string(field)); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, true
}

// parentOf returns the parent pid recorded in a /proc/PID/stat file, or 0.
// The command name in parentheses may itself contain ") ", so the fields
// are taken after the last ')'.
func parentOf(statPath string, buf []byte) int {
	f, err := os.Open(statPath)
	if err != nil {
		return 0
	}
	n, _ := f.Read(buf)
	f.Close()
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(string(fields[1]))
	return ppid
}

// catches reports whether process pid has a handler installed for sig,
// from the SigCgt mask of /proc/PID/status (bit N-1 for signal N). When
// the mask cannot be read the signal is delivered: losing a stop request
// is worse than delivering one the kernel would have dropped.
func catches(pid int, sig syscall.Signal) bool {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return true
	}
	defer f.Close()
	buf := make([]byte, 4096) // SigCgt is in the first 1.5 KiB
	n, _ := io.ReadFull(f, buf)
	for _, line := range bytes.Split(buf[:n], []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("SigCgt:")); ok {
			mask, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 16, 64)
			if err != nil {
				return true
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	return true
}
