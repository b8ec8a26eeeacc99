//go:build unix

package statevol

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
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
	lockExt = ".lock"
	// endedExt names a member's ended marker (MarkEnded).
	endedExt = ".ended"
	// lockTries bounds how often a supervisor tries to take its shared
	// lock while someone holds it exclusively: a waiter's probe holds it
	// for microseconds, so only an adversary holds it for longer, and a
	// supervisor does not wait on an adversary to start.
	lockTries = 200
)

// lockPath returns where the liveness lock of container lives.
func lockPath(dir, container string) string {
	return filepath.Join(dir, contract.LiveDir, container+lockExt)
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
	if err := CheckContainerName(container); err != nil {
		return nil, err
	}
	if _, err := sharedSubdir(dir, contract.LiveDir); err != nil {
		return nil, err
	}
	name := container + lockExt
	dfd, err := openSubdir(dir, contract.LiveDir, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, fileMode)
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
	_ = unix.Fchmod(fd, fileMode) // the umask may have narrowed it
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

// Aliveness is what the liveness lock of a member says.
type Aliveness int

const (
	// LivenessUnknown: no lock file that can be trusted (a supervisor of
	// an older release, one that could not create its lock, a file
	// planted by another UID); the status document is all there is.
	LivenessUnknown Aliveness = iota
	// Alive: someone holds the lock.
	Alive
	// Dead: the lock is free; no supervisor of the member runs.
	Dead
)

// ProbeLiveness tells whether a supervisor of container holds its liveness
// lock. owner is the UID that owns the member's status document, -1 when
// there is none: the lock counts only when the same UID owns it.
func ProbeLiveness(dir, container string, owner int) Aliveness {
	fd, err := unix.Open(lockPath(dir, container), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return LivenessUnknown
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || (owner >= 0 && int(st.Uid) != owner) {
		return LivenessUnknown
	}
	switch err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err {
	case nil:
		unix.Flock(fd, unix.LOCK_UN)
		return Dead
	case unix.EWOULDBLOCK:
		return Alive
	default:
		return LivenessUnknown
	}
}

// MarkEnded creates (on) or removes the member's ended marker,
// live/<container>.ended: an empty file that says its workload exited for
// good, beside the status document that says so too. Being empty, it
// needs no data block: on a volume that is full (a co-container filling a
// Memory emptyDir), where the document cannot be written, the others still
// learn that the member ended, and no two ended members wait for each
// other for ever. Made like the lock: relative to a no-follow descriptor
// of live/, without following a link, a regular file of this UID.
func MarkEnded(dir, container string, on bool) error {
	if err := CheckContainerName(container); err != nil {
		return err
	}
	name := container + endedExt
	dfd, err := openSubdir(dir, contract.LiveDir, name)
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
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, fileMode)
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

// EndedMarked reports whether container has an ended marker that owner,
// the UID of its status document, made (-1: no document, no marker).
func EndedMarked(dir, container string, owner int) bool {
	if owner < 0 {
		return false
	}
	fd, err := unix.Open(filepath.Join(dir, contract.LiveDir, container+endedExt), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && int(st.Uid) == owner
}

// StatusOwner returns the UID that owns the status document of container,
// -1 when there is none: what a member's lock and ended marker are checked
// against (ProbeLiveness, EndedMarked).
func StatusOwner(dir, container string) int {
	fi, err := os.Lstat(StatusPath(dir, container))
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// ReadOwnStatus reads the status document of container only when this
// process's UID owns it: the document an earlier supervisor of the same
// container left behind. Another UID can create <container>.json before
// this container ever writes it (the sticky bit only stops it replacing a
// document that exists), and its back-off must not be taken up. The
// status directory is sticky, so a document of
// our UID cannot be replaced by another non-root UID between the check and
// the read.
func ReadOwnStatus(dir, container string) (Status, error) {
	if owner := StatusOwner(dir, container); owner >= 0 && owner != os.Geteuid() {
		return Status{}, fmt.Errorf("status %s: owned by UID %d, not by this supervisor's UID %d", container, owner, os.Geteuid())
	}
	return ReadStatus(dir, container)
}
