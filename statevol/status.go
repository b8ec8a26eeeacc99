//go:build unix

package statevol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

const (
	// sharedDirMode: every container of the pod may run as a different
	// UID and must be able to create and replace its own files, and the
	// sticky bit keeps it from replacing or removing anyone else's: in a
	// sticky directory rename(2) over a file and unlink(2) of it are
	// refused with EPERM unless the caller owns the file or the
	// directory, or has CAP_FOWNER.
	sharedDirMode = 0o777 | unix.S_ISVTX
	fileMode      = 0o644
)

// StatusPath returns where the status document of container lives.
func StatusPath(dir, container string) string {
	return filepath.Join(dir, contract.StatusDir, container+contract.StatusExt)
}

// CheckContainerName rejects names that cannot be a file name in the
// status directory. Kubernetes container names (DNS-1123 labels) all pass.
func CheckContainerName(name string) error {
	switch {
	case name == "":
		return errors.New("container name is empty (set --name or " + contract.EnvContainerName + ")")
	case len(name) > 253, strings.ContainsAny(name, "/\x00"), strings.HasPrefix(name, "."):
		return fmt.Errorf("container name %q: must not start with '.', contain '/' or exceed 253 bytes", name)
	}
	return nil
}

// WriteStatus replaces the status document of s.Container atomically:
// a reader sees either the previous document or this one, never a mix.
// UpdatedAt is set to now when zero.
func WriteStatus(dir string, s Status) error {
	if err := CheckContainerName(s.Container); err != nil {
		return err
	}
	if s.UpdatedAt.IsZero() {
		s.UpdatedAt = time.Now()
	}
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("status of %s: %w", s.Container, err)
	}
	if _, err := sharedSubdir(dir, contract.StatusDir); err != nil {
		return err
	}
	return writeAtomicBeneath(dir, contract.StatusDir, s.Container+contract.StatusExt, append(data, '\n'))
}

// writeAtomicBeneath writes data to dir/sub/name through a synced
// temporary file and rename(2), so a reader sees the old document or the
// new one, without following a symbolic link at sub or at the file: any
// container of the pod can replace status/ by a link, and the writer,
// possibly root, would then replace <name>.json wherever the link leads.
// rename(2) replaces a link at the name rather than its target.
func writeAtomicBeneath(dir, sub, name string, data []byte) error {
	dfd, err := openSubdir(dir, sub, name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp, err := createTempAt(dfd, name, data)
	if err != nil {
		return err
	}
	if err := unix.Renameat(dfd, tmp, dfd, name); err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// openSubdir opens dir/sub, refusing a symbolic link, for operations
// relative to it that a link swapped in later cannot redirect.
func openSubdir(dir, sub, name string) (int, error) {
	dfd, err := unix.Open(filepath.Join(dir, sub), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return -1, fmt.Errorf("write %s: %s is not a directory", name, filepath.Join(dir, sub))
	}
	if err != nil {
		return -1, fmt.Errorf("write %s: %w", name, err)
	}
	return dfd, nil
}

// createTempAt writes data into a new hidden file in the directory dfd,
// readable by every UID, and returns its name.
//
// The file is not synced: an fsync costs about 0.5 ms on a node's disk,
// and a supervisor writes its document at start, at every state change
// and at exit, on the path a container's start and stop wait for. Nothing
// here needs to survive a power loss: the state volume is an emptyDir, and
// after a node restart every container of the pod starts again. A document
// or generation file torn by one is read as invalid and ignored, as any
// malformed file in the volume is.
func createTempAt(dfd int, name string, data []byte) (string, error) {
	var tmp string
	var fd int
	var err error
	for i := 0; ; i++ {
		tmp = fmt.Sprintf(".%s.%d.%d.tmp", name, os.Getpid(), time.Now().UnixNano()+int64(i))
		fd, err = unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fileMode)
		if err != unix.EEXIST || i == 100 {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		// The umask may have narrowed the mode; every UID must read it.
		err = f.Chmod(fileMode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return tmp, nil
}

// ReadAll returns the status of every container that has written one,
// sorted by container name. Documents that cannot be read or parsed are
// left out and reported in the error, which is nil when all were read. A
// missing status directory yields no statuses and no error.
func ReadAll(dir string) ([]Status, error) {
	sdir := filepath.Join(dir, contract.StatusDir)
	names, err := listNames(dir, contract.StatusDir, maxStatusEntries)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return nil, fmt.Errorf("state directory: %w", derr)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	var out []Status
	var errs []error
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, contract.StatusExt) {
			continue // a directory of that name fails readBounded's check
		}
		data, err := readBounded(filepath.Join(sdir, name), maxStatusSize)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("status %s: %w", name, err))
			continue
		}
		var s Status
		if err := json.Unmarshal(data, &s); err != nil {
			errs = append(errs, fmt.Errorf("status %s: %v", name, err))
			continue
		}
		// The file name is the authority: a document copied under another
		// name must not show up twice under one container.
		s.Container = strings.TrimSuffix(name, contract.StatusExt)
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
	return out, errors.Join(errs...)
}

// maxStatusSize bounds a status document. A real one is well under 2 KiB;
// every container of the pod can write to the directory, so a document is
// read as an adversary's file.
const maxStatusSize = 64 << 10

// ReadStatus reads the status document of container.
func ReadStatus(dir, container string) (Status, error) {
	var s Status
	data, err := readBounded(StatusPath(dir, container), maxStatusSize)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("status %s: %v", container, err)
	}
	return s, nil
}

// readBounded reads a regular file of at most max bytes. It refuses a
// symbolic link (which could point anywhere in the reader's filesystem) and
// any special file (a FIFO would block the reader for ever), without
// opening anything but the file itself.
func readBounded(path string, max int64) ([]byte, error) {
	return boundedfile.Read(path, filepath.Base(path), max, false)
}

// sharedSubdir creates dir/name if needed, writable by every UID of the
// pod and sticky. The directory is made under a temporary name, given its
// mode (which mkdir's umask would have narrowed) and moved into place with
// RENAME_NOREPLACE, so no container ever sees it with a narrower mode or
// without the sticky bit, and a directory another container already uses
// (and watches) is never replaced. A directory that exists without the
// sticky bit (made by an older supervisor) gets it when this process may
// change its mode, and is used as it is otherwise; see Seal.
func sharedSubdir(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	// Lstat: a link planted by another container is not our directory.
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		if !sealed(fi) {
			Seal(p, true)
		}
		return p, nil
	}
	tmp, err := os.MkdirTemp(dir, "."+name+"-")
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	defer os.Remove(tmp) // fails harmlessly once renamed
	if err := chmodDir(tmp, sharedDirMode); err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	err = renameNoReplace(tmp, p)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A filesystem without RENAME_NOREPLACE: mkdir, then set the
		// mode. Only the creator may chmod; if another container wins
		// the mkdir, its own chmod follows.
		if err = os.Mkdir(p, 0o777); err == nil {
			err = chmodDir(p, sharedDirMode)
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("state directory: %w", err)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("state directory: %s is not a directory", p)
	}
	return p, nil
}

// chmodDir sets the mode of the directory path, refusing a symbolic link:
// between our mkdir and the chmod another container can move our
// directory away (the volume's root is writable by all) and put a link in
// its place, and chmod(2) by name would change wherever it leads.
func chmodDir(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// sealed reports whether Seal has nothing left to do on the directory fi
// describes, as far as this process can tell without opening it.
func sealed(fi os.FileInfo) bool {
	if fi.Mode()&os.ModeSticky == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == 0 || os.Geteuid() != 0
}

// Seal adds the sticky bit to the shared directory path when it is
// writable by every UID and lacks it: the state volume's root (an
// emptyDir is 0777), or a subdirectory an older supervisor made 0777.
// Only the directory's owner or a process with CAP_FOWNER may change its
// mode; anyone else leaves it as it is (EPERM is expected, not an error).
// The sticky bit spares the directory's owner, the UID of the first
// supervisor that needed it: with ours, a supervisor running as root gives
// a subdirectory to root, so that no container's UID owns it (the volume's
// root, which the kubelet makes root's, is not given away). A directory
// that is not world-writable is not shared and is left alone.
func Seal(path string, ours bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&0o002 == 0 {
		return
	}
	if ours && st.Uid != 0 && os.Geteuid() == 0 {
		_ = unix.Fchown(fd, 0, -1)
	}
	if st.Mode&unix.S_ISVTX == 0 {
		_ = unix.Fchmod(fd, uint32(st.Mode&0o7777)|unix.S_ISVTX)
	}
}
