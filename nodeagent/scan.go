package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
	"github.com/restart-supervisor/restart-supervisor/podstate"
)

// Limits bound the cost of one scan of the pods directory. Every file under
// a pod's state volume is written by the pod's containers, so a scan reads
// it as an adversary's: these limits hold whatever a pod puts there.
type Limits struct {
	// MaxPods is how many pod directories one scan looks at.
	MaxPods int
	// MaxEntriesPerPod is how many directory entries of one pod's status
	// directory one scan lists, documents or not.
	MaxEntriesPerPod int
	// MaxDocsPerPod is how many status documents of one pod one scan reads.
	MaxDocsPerPod int
	// MaxDocsPerNode is how many status documents one scan reads in all.
	MaxDocsPerNode int
	// MaxDocSize is the largest status document read.
	MaxDocSize int64
}

// DefaultLimits: a node runs at most a few hundred pods (the kubelet's
// default maxPods is 110) and a pod rarely more than a few dozen
// containers; a status document is under 2 KiB.
var DefaultLimits = Limits{
	MaxPods:          1024,
	MaxEntriesPerPod: 1024,
	MaxDocsPerPod:    128,
	MaxDocsPerNode:   8192,
	MaxDocSize:       64 << 10,
}

// Doc is one status document found on the node.
type Doc struct {
	PodUID string
	podstate.Status
}

// statusPath is where a pod's status documents are, relative to the pod's
// directory under the kubelet's pods directory.
var statusPath = []string{"volumes", "kubernetes.io~empty-dir", contract.StateVolume, contract.StatusDir}

// Scan reads the status documents of every pod under podsDir (the kubelet's
// pods directory, <uid>/volumes/kubernetes.io~empty-dir/<state volume>/
// status/*.json). podsDir itself may be a symbolic link (some distributions
// move /var/lib/kubelet); below it nothing is followed: each directory is
// opened relative to its parent's descriptor with O_NOFOLLOW, and each
// document is read by boundedfile (regular files only, no link, capped).
// Pods without a state volume are skipped silently; every document or
// directory refused is one error naming it, and the scan goes on.
func Scan(podsDir string, lim Limits) ([]Doc, []error) {
	root, err := unix.Open(podsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, []error{fmt.Errorf("pods directory %s: %w", podsDir, err)}
	}
	uids, err := listDir(root, lim.MaxPods)
	if err != nil {
		unix.Close(root)
		return nil, []error{fmt.Errorf("pods directory %s: %w", podsDir, err)}
	}
	defer unix.Close(root)
	var docs []Doc
	var errs []error
	if len(uids) > lim.MaxPods {
		errs = append(errs, fmt.Errorf("pods directory %s: more than %d entries; the rest are not read", podsDir, lim.MaxPods))
		uids = uids[:lim.MaxPods]
	}
	budget := lim.MaxDocsPerNode
	for _, uid := range uids {
		if budget <= 0 {
			errs = append(errs, fmt.Errorf("pods directory %s: more than %d status documents on the node; the rest are not read", podsDir, lim.MaxDocsPerNode))
			break
		}
		d, e := scanPod(root, podsDir, uid, lim, &budget)
		docs = append(docs, d...)
		errs = append(errs, e...)
	}
	return docs, errs
}

func scanPod(root int, podsDir, uid string, lim Limits, budget *int) ([]Doc, []error) {
	if strings.HasPrefix(uid, ".") {
		return nil, nil
	}
	dir := filepath.Join(append([]string{podsDir, uid}, statusPath...)...)
	fd, err := openDirBeneath(root, append([]string{uid}, statusPath...))
	if errors.Is(err, unix.ENOENT) {
		return nil, nil // no state volume, or no document yet
	}
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", dir, err)}
	}
	defer unix.Close(fd)
	names, err := listDir(fd, lim.MaxEntriesPerPod)
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", dir, err)}
	}
	var errs []error
	if len(names) > lim.MaxEntriesPerPod {
		errs = append(errs, fmt.Errorf("%s: more than %d entries; the rest are not read", dir, lim.MaxEntriesPerPod))
		names = names[:lim.MaxEntriesPerPod]
	}
	var docs []Doc
	read := 0
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, contract.StatusExt) {
			continue
		}
		if read >= lim.MaxDocsPerPod || *budget <= 0 {
			errs = append(errs, fmt.Errorf("%s: more than %d status documents; the rest are not read", dir, read))
			break
		}
		read++
		*budget--
		path := filepath.Join(dir, name)
		data, err := boundedfile.ReadAt(fd, name, path, lim.MaxDocSize, false)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced or removed since the listing
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var s podstate.Status
		if err := json.Unmarshal(data, &s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", path, err))
			continue
		}
		// As in podstate.ReadAll, the file name is the authority.
		s.Container = strings.TrimSuffix(name, contract.StatusExt)
		docs = append(docs, Doc{PodUID: uid, Status: s})
	}
	return docs, errs
}

// openDirBeneath opens the directory at the path components below the
// directory descriptor dir, refusing a symbolic link at every level.
func openDirBeneath(dir int, components []string) (int, error) {
	fd := dir
	for _, c := range components {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if fd != dir {
			unix.Close(fd)
		}
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return -1, fmt.Errorf("%s: not a directory (a symbolic link or a file)", c)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// listDir returns up to max+1 names of the directory dirfd, so that the
// caller can tell a directory over the limit without listing all of it.
func listDir(dirfd, max int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	var names []string
	for len(names) <= max {
		batch, err := f.Readdirnames(min(256, max+1-len(names)))
		names = append(names, batch...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return names, err
		}
	}
	return names, nil
}
