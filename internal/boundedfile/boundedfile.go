// Package boundedfile reads files that someone else may have written as an
// adversary: only regular files, never blocking on open or read, and at
// most a given number of bytes. The supervisor reads its config and the
// pod's shared state volume through it.
package boundedfile

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Read returns the content of the regular file at path, of at most max
// bytes. Errors name the file as name. With followLinks false a symbolic
// link at path is refused (it could point anywhere in the reader's
// filesystem). Anything but a regular file is refused, found by fstat on a
// descriptor opened with O_NONBLOCK, so that a FIFO without a writer does
// not block the open and /dev/zero is never read.
func Read(path, name string, max int64, followLinks bool) ([]byte, error) {
	return ReadAt(unix.AT_FDCWD, path, name, max, followLinks)
}

// ReadAt is Read of path relative to the directory descriptor dirfd (or
// unix.AT_FDCWD), for readers that walk a tree someone else controls one
// no-follow directory descriptor at a time.
func ReadAt(dirfd int, path, name string, max int64, followLinks bool) ([]byte, error) {
	return readAt(dirfd, path, name, max, followLinks, -1)
}

// ReadAtOwnedBy is ReadAt, never following a link, of a file that must be
// owned by uid: the owner is checked on the descriptor the content is read
// from, so that a file swapped in between a check by path and the read
// cannot pass for the owner's.
func ReadAtOwnedBy(dirfd int, path, name string, max int64, uid uint32) ([]byte, error) {
	return readAt(dirfd, path, name, max, false, int64(uid))
}

func readAt(dirfd int, path, name string, max int64, followLinks bool, owner int64) ([]byte, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if !followLinks {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat(dirfd, path, flags, 0)
	if err != nil {
		if err == unix.ELOOP && !followLinks {
			return nil, fmt.Errorf("%s: is a symbolic link", name)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); owner >= 0 && (!ok || int64(st.Uid) != owner) {
		return nil, fmt.Errorf("%s: not owned by UID %d", name, owner)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes: larger than %d bytes", name, fi.Size(), max)
	}
	// The size may grow between fstat and read: read one byte more than
	// allowed to tell.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, max)
	}
	return data, nil
}
