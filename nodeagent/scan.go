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
	"github.com/restart-supervisor/restart-supervisor/statevol"
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
	// MaxBytesPerPod is how many bytes of status documents of one pod one
	// scan reads; MaxBytesPerScan how many in all. The agent handles the
	// documents pod by pod (ScanEach), so what it holds at once is one
	// pod's, and a scan's reading is bounded however many pods write the
	// largest documents they may.
	MaxBytesPerPod  int64
	MaxBytesPerScan int64
}

// DefaultLimits: a node runs at most a few hundred pods (the kubelet's
// default maxPods is 110) and a pod rarely more than a few dozen
// containers; a status document is under 2 KiB, so 128 of them are 256 KiB,
// half of MaxBytesPerPod, and 110 such pods 28 MiB, under MaxBytesPerScan.
var DefaultLimits = Limits{
	MaxPods:          1024,
	MaxEntriesPerPod: 1024,
	MaxDocsPerPod:    128,
	MaxDocsPerNode:   8192,
	MaxDocSize:       64 << 10,
	MaxBytesPerPod:   512 << 10,
	MaxBytesPerScan:  32 << 20,
}

// withDefaults fills the zero fields of lim from DefaultLimits.
func (lim Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick64 := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&lim.MaxPods, d.MaxPods)
	pick(&lim.MaxEntriesPerPod, d.MaxEntriesPerPod)
	pick(&lim.MaxDocsPerPod, d.MaxDocsPerPod)
	pick(&lim.MaxDocsPerNode, d.MaxDocsPerNode)
	pick64(&lim.MaxDocSize, d.MaxDocSize)
	pick64(&lim.MaxBytesPerPod, d.MaxBytesPerPod)
	pick64(&lim.MaxBytesPerScan, d.MaxBytesPerScan)
	return lim
}

// Doc is one status document found on the node.
type Doc struct {
	PodUID string `json:"-"`
	statevol.Status
	// RestartsTotal is the in-place restarts of the container across its
	// supervisors (statevol.Status.RestartsTotal, which this field shadows
	// in decoding): a pointer, so that a document of an earlier release,
	// which has no such field, reads as nil, and the agent then rebuilds
	// the count (containerCount).
	RestartsTotal *int `json:"restartsTotal,omitempty"`
}

// PodDocs is one pod directory of a scan.
type PodDocs struct {
	UID  string
	Docs []Doc
	// Skipped: the scan's byte or document budget was spent before this
	// pod was read; its documents are unknown this time, not gone.
	Skipped bool
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
// directory refused is one error naming it, and the scan goes on. Scan
// holds every document of the scan at once; the agent uses ScanEach.
func Scan(podsDir string, lim Limits) ([]Doc, []error) {
	var docs []Doc
	errs := ScanEach(podsDir, lim, func(p PodDocs) { docs = append(docs, p.Docs...) })
	return docs, errs
}

// budget is what is left of one scan's limits.
type budget struct {
	docs  int
	bytes int64
}

// ScanEach is Scan one pod at a time: visit gets each pod directory's
// documents, and keeps them or not, before the next pod is read. A pod
// directory left unread because the scan's budget (MaxDocsPerNode,
// MaxBytesPerScan) was spent is visited with Skipped set; one error says
// how many.
func ScanEach(podsDir string, lim Limits, visit func(PodDocs)) []error {
	lim = lim.withDefaults()
	root, err := unix.Open(podsDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return []error{fmt.Errorf("pods directory %s: %w", podsDir, err)}
	}
	defer unix.Close(root)
	uids, err := listDir(root, lim.MaxPods)
	if err != nil {
		return []error{fmt.Errorf("pods directory %s: %w", podsDir, err)}
	}
	var errs []error
	if len(uids) > lim.MaxPods {
		errs = append(errs, fmt.Errorf("pods directory %s: more than %d entries; the rest are not read", podsDir, lim.MaxPods))
		uids = uids[:lim.MaxPods]
	}
	left := budget{docs: lim.MaxDocsPerNode, bytes: lim.MaxBytesPerScan}
	skipped := 0
	for _, uid := range uids {
		if strings.HasPrefix(uid, ".") {
			continue
		}
		if left.docs <= 0 || left.bytes <= 0 {
			skipped++
			visit(PodDocs{UID: uid, Skipped: true})
			continue
		}
		d, e := scanPod(root, podsDir, uid, lim, &left)
		errs = append(errs, e...)
		visit(PodDocs{UID: uid, Docs: d})
	}
	if skipped > 0 {
		// First, with the other errors about the whole directory: the
		// agent logs only the first few errors of a scan.
		errs = append([]error{fmt.Errorf("pods directory %s: the scan's budget (%d status documents, %d bytes) is spent; %d pod directories are not read this time",
			podsDir, lim.MaxDocsPerNode, lim.MaxBytesPerScan, skipped)}, errs...)
	}
	return errs
}

func scanPod(root int, podsDir, uid string, lim Limits, left *budget) ([]Doc, []error) {
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
	podBytes := int64(0)
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, contract.StatusExt) {
			continue
		}
		if read >= lim.MaxDocsPerPod || left.docs <= 0 {
			errs = append(errs, fmt.Errorf("%s: more than %d status documents; the rest are not read", dir, read))
			break
		}
		if podBytes >= lim.MaxBytesPerPod || left.bytes <= 0 {
			errs = append(errs, fmt.Errorf("%s: %d status documents make %d bytes, the most one scan reads of a pod or what is left of the scan's; the rest are not read", dir, read, podBytes))
			break
		}
		read++
		left.docs--
		path := filepath.Join(dir, name)
		data, err := boundedfile.ReadAt(fd, name, path, lim.MaxDocSize, false)
		podBytes += int64(len(data))
		left.bytes -= int64(len(data))
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced or removed since the listing
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d := Doc{PodUID: uid}
		if err := json.Unmarshal(data, &d); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", path, err))
			continue
		}
		// As in statevol.ReadAll, the file name is the authority.
		d.Container = strings.TrimSuffix(name, contract.StatusExt)
		d.PodUID = uid
		docs = append(docs, d)
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
