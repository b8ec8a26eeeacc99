package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

// ErrNodeBusy: another user of the node holds its lock.
var ErrNodeBusy = errors.New("the node's end-to-end cluster is in use")

// Lock takes the node lock of the cluster in dir (the file dir+".lock"):
// every user of the node holds it while it brings a cluster up, uses it
// or tears it down (the Go tests' node setup for the whole test,
// e2e-cluster up and down for the command), so that none replaces a
// cluster another is using. With wait false a held lock is ErrNodeBusy.
func Lock(dir string, wait bool) (unlock func(), err error) {
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s.lock is held: a test or another e2e-cluster command)", ErrNodeBusy, dir)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}

// manualMarker is the file a cluster brought up by hand leaves in its
// directory: the pid of its kube-apiserver. Such a cluster outlives the
// command that held the lock while making it.
const manualMarker = "manual-up"

// MarkManual records c as brought up by hand.
func MarkManual(c *Cluster) error {
	for _, p := range c.Processes {
		if p.Name == "kube-apiserver" {
			return os.WriteFile(filepath.Join(c.Dir, manualMarker), []byte(strconv.Itoa(p.PID)+"\n"), 0o600)
		}
	}
	return errors.New("no kube-apiserver among the cluster's processes")
}

// ManualCluster reports whether a cluster brought up by hand still runs
// in dir: its marker names a live process that is a kube-apiserver (a pid
// reused by anything else is a stale marker).
func ManualCluster(dir string) (pid int, running bool) {
	data, err := boundedfile.Read(filepath.Join(dir, manualMarker), manualMarker, 32, false)
	if err != nil {
		return 0, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return pid, false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return pid, filepath.Base(string(argv0)) == "kube-apiserver"
}
