//go:build unix

package statevol

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// Listing the state volume's shared directories. Every container of the
// pod can create names in pod-restarts/ and status/, or put a link to a
// directory of its choice where one of them belongs; a listing is read as
// an adversary's: the directory itself is opened without following a link
// and no more than a bound of names is read, held or sorted.

// maxGenEntries bounds a listing of pod-restarts/. What the pod itself
// keeps there is at most the last GenKeep+1 generations (prune), each with
// one file, the agent's release and up to four markers per member
// (stopped, started, failed, grouped), for at most contract.MaxPodMembers
// members; the bound leaves room for one more generation and for
// temporary files.
const maxGenEntries = (GenKeep + 2) * (4*contract.MaxPodMembers + 2)

// maxStatusEntries bounds a listing of status/: one document per
// container, for at most contract.MaxPodMembers members and as many
// containers outside pod restarts, and their temporary files.
const maxStatusEntries = 4 * contract.MaxPodMembers

// listNames returns the names in dir/sub, opened without following a
// link; more than max names is an error (the names are then not
// returned), as is a link or anything else that is not a directory.
func listNames(dir, sub string, max int) ([]string, error) {
	f, err := openListing(filepath.Join(dir, sub))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readNames(f, max)
}

// openListing opens the directory p without following a link in its
// place, for readNames and for removals relative to it (unlinkat): a name
// removed by its path would be looked up again, through whatever link a
// container has put at p since.
func openListing(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case err == unix.ELOOP || err == unix.ENOTDIR:
		return nil, fmt.Errorf("%s: not a directory (a link or another file in its place)", p)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil // owns fd from here
}

// readNames reads the names of the open directory f, more than max of
// them an error.
func readNames(f *os.File, max int) ([]string, error) {
	p := f.Name()
	var names []string
	for len(names) <= max {
		batch, err := f.Readdirnames(min(1024, max+1-len(names)))
		names = append(names, batch...)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &os.PathError{Op: "readdir", Path: p, Err: err}
		}
	}
	if len(names) > max {
		return nil, fmt.Errorf("%s: more than %d entries; not read", p, max)
	}
	return names, nil
}

// genNames lists pod-restarts/ (listNames, maxGenEntries).
func genNames(dir string) ([]string, error) {
	return listNames(dir, contract.PodRestartsDir, maxGenEntries)
}
