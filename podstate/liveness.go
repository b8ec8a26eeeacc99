package podstate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// A member's status document is written by its supervisor alone, so it
// cannot tell the others that the supervisor died: a container killed
// whole (SIGKILL of PID 1, an out-of-memory kill under cgroup v2's
// memory.oom.group, the kubelet's default since 1.28) leaves "running" for
// good, and so does a volume that was full or read-only at the last write.
// Liveness comes from the kernel instead: every supervisor holds a shared
// flock(2) on live/<container>.lock for its whole life. The kernel drops
// the lock when the last descriptor of it is closed, at the latest when the
// process dies, however it dies. A member that finds the lock free (it can
// take LOCK_EX|LOCK_NB) knows that no supervisor of that container runs.
//
// flock locks belong to the open file, that is to the inode, and the
// state volume is one filesystem (an emptyDir is a directory of the
// node's), so a lock taken in one container's mount namespace is seen in
// every other's.
//
// What an adversary with write access to the volume can do: hold the lock
// (any UID that can open the file), which makes a dead member look alive,
// as a forged "running" document always could; every wait that depends on
// it stays bounded where it was bounded before. Making a live member look
// dead takes replacing its lock file, which the sticky live/ directory
// refuses to any other non-root UID; a lock file not owned by the UID that
// owns the member's status document is not taken as evidence of anything.

const (
	liveDir = "live"
	lockExt = ".lock"
	// endedExt names a member's ended marker (markEnded).
	endedExt = ".ended"
	// lockTries bounds how often a supervisor tries to take its shared
	// lock while someone holds it exclusively: a waiter's probe holds it
	// for microseconds, so only an adversary holds it for longer, and a
	// supervisor does not wait on an adversary to start.
	lockTries = 200
)

// LockPath returns where the liveness lock of container lives.
func LockPath(dir, container string) string {
	return filepath.Join(dir, liveDir, container+lockExt)
}

// Liveness is a held liveness lock; Release drops it.
type Liveness struct{ fd int }

// HoldLiveness creates (or opens) the liveness lock of container in the
// state directory dir and takes a shared lock on it, for the caller's whole
// life. The file is opened without following a link, relative to a
// no-follow descriptor of live/, must be a regular file owned by this
// process's UID, and is never passed to a child (O_CLOEXEC): a workload
// that outlives its supervisor must not keep the supervisor alive in the
// others' eyes.
func HoldLiveness(dir, container string) (*Liveness, error) {
	if err := statevol.CheckContainerName(container); err != nil {
		return nil, err
	}
	if _, err := statevol.SharedSubdir(dir, liveDir); err != nil {
		return nil, err
	}
	name := container + lockExt
	dfd, err := statevol.OpenSubdir(dir, liveDir, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, statevol.FileMode)
	if err != nil {
		return nil, fmt.Errorf("liveness lock %s: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("liveness lock %s: %w", name, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		unix.Close(fd)
		return nil, fmt.Errorf("liveness lock %s: not a regular file", name)
	case int(st.Uid) != os.Geteuid():
		// Another UID made it first; it could remove it and put a free
		// one in its place at any time.
		unix.Close(fd)
		return nil, fmt.Errorf("liveness lock %s: owned by UID %d, not by this supervisor's UID %d", name, st.Uid, os.Geteuid())
	}
	_ = unix.Fchmod(fd, statevol.FileMode) // the umask may have narrowed it
	for try := 0; ; try++ {
		err = unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB)
		if err != unix.EWOULDBLOCK || try == lockTries {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("liveness lock %s: %w", name, err)
	}
	return &Liveness{fd: fd}, nil
}

// Release drops the lock. A nil *Liveness holds nothing.
func (l *Liveness) Release() {
	if l != nil && l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

// aliveness is what the liveness lock of a member says.
type aliveness int

const (
	// livenessUnknown: no lock file that can be trusted (a supervisor of
	// an older release, one that could not create its lock, a file
	// planted by another UID); the status document is all there is.
	livenessUnknown aliveness = iota
	// alive: someone holds the lock.
	alive
	// dead: the lock is free; no supervisor of the member runs.
	dead
)

// probeLiveness tells whether a supervisor of container holds its liveness
// lock. owner is the UID that owns the member's status document, -1 when
// there is none: the lock counts only when the same UID owns it.
func probeLiveness(dir, container string, owner int) aliveness {
	fd, err := unix.Open(LockPath(dir, container), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return livenessUnknown
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || (owner >= 0 && int(st.Uid) != owner) {
		return livenessUnknown
	}
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err {
	case nil:
		unix.Flock(fd, unix.LOCK_UN)
		return dead
	case unix.EWOULDBLOCK:
		return alive
	default:
		return livenessUnknown
	}
}

// markEnded creates (on) or removes the member's ended marker,
// live/<container>.ended: an empty file that says its workload exited for
// good, beside the status document that says so too. Being empty, it
// needs no data block: on a volume that is full (a co-container filling a
// Memory emptyDir), where the document cannot be written, the others still
// learn that the member ended, and no two ended members wait for each
// other for ever. Made like the lock: relative to a no-follow descriptor
// of live/, without following a link, a regular file of this UID.
func markEnded(dir, container string, on bool) error {
	if err := statevol.CheckContainerName(container); err != nil {
		return err
	}
	name := container + endedExt
	dfd, err := statevol.OpenSubdir(dir, liveDir, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if !on {
		if err := unix.Unlinkat(dfd, name, 0); err != nil && err != unix.ENOENT {
			return fmt.Errorf("ended marker %s: %w", name, err)
		}
		return nil
	}
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, statevol.FileMode)
	if err != nil {
		return fmt.Errorf("ended marker %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("ended marker %s: not a regular file of this supervisor's UID", name)
	}
	return nil
}

// endedMarked reports whether container has an ended marker that owner,
// the UID of its status document, made (-1: no document, no marker).
func endedMarked(dir, container string, owner int) bool {
	if owner < 0 {
		return false
	}
	fd, err := unix.Open(filepath.Join(dir, liveDir, container+endedExt), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == owner
}

// memberState is one other member as a waiter sees it: its status
// document (err when there is none or it cannot be read), whether its
// supervisor lives, and whether it marked its end (markEnded).
type memberState struct {
	doc   statevol.Status
	err   error
	live  aliveness
	ended bool
}

// readMember reads the status document of container and probes its
// liveness lock.
func readMember(dir, container string) memberState {
	owner := -1
	if fi, err := os.Lstat(statevol.StatusPath(dir, container)); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			owner = int(st.Uid)
		}
	}
	doc, err := statevol.ReadStatus(dir, container)
	return memberState{doc: doc, err: err, live: probeLiveness(dir, container, owner), ended: endedMarked(dir, container, owner)}
}

// missingDoc reports whether the member has no status document.
func (s memberState) missingDoc() bool { return errors.Is(s.err, os.ErrNotExist) }
