//go:build unix

package statevol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// Pod restarts (KEP-5532 RestartAllContainers) are numbered generations.
// Generation N exists when the file pod-restarts/<N> exists; the current
// generation is the highest present, 0 when none is. Every supervisor knows
// the generation its workload's current run belongs to (its "observed"
// generation).
//
// The exactly-once rule: an announcement carries the generation its
// announcer observed, G, and can only create generation G+1. The file is
// made by link(2), which fails when the name exists, so of several
// containers that hit the rule during the same generation exactly one
// creates G+1 and the others learn that the pod restart they asked for is
// already under way. Every supervisor restarts its workload once for each
// generation above the one it observed, and then observes the new one: one
// announcement, one restart of each container, no loop.

const (
	// GenKeep is how many older generation files an announcer leaves for
	// inspection; only the newest is ever needed.
	GenKeep = 8
	// MaxGeneration is the highest generation number taken from a file
	// name. Any container of the pod can create files in pod-restarts/,
	// and a name of 18446744073709551615 made the next announcement wrap
	// to 0 and be ignored for good; names above this are not generations.
	// A pod restart a second would take 35 000 years to get here.
	MaxGeneration = 1 << 40
	// maxGenerationSize bounds a generation file: a real one is about
	// 100 bytes of JSON.
	maxGenerationSize = 4 << 10
)

// Generation is one pod restart.
type Generation struct {
	N uint64 `json:"generation"`
	// Source is the container whose exit announced it, ExitCode that exit.
	Source   string    `json:"source"`
	ExitCode int32     `json:"exitCode"`
	Time     time.Time `json:"time"`
	// Group is set on a generation the node agent delivered for a group
	// restart (group.go); Source is then contract.GroupSource.
	Group *GroupCause `json:"group,omitempty"`
}

func GenName(n uint64) string { return fmt.Sprintf("%020d", n) }

// Current returns the pod's current restart generation.
func Current(dir string) (uint64, error) {
	names, err := genNames(dir)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(dir); derr != nil {
			return 0, fmt.Errorf("state directory: %w", derr)
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("state directory: %w", err)
	}
	var max uint64
	for _, name := range names {
		if n, ok := ParseGenName(name); ok && n > max {
			max = n
		}
	}
	return max, nil
}

// ParseGenName returns the generation a file name stands for, if any.
func ParseGenName(name string) (uint64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(name, 10, 64)
	return n, err == nil && n <= MaxGeneration
}

// ReadGeneration returns the details of generation n. A generation whose
// file was pruned or cannot be parsed still has its number.
func ReadGeneration(dir string, n uint64) Generation {
	g := Generation{N: n}
	// Any container can put a FIFO, a huge file or a link to /dev/zero
	// here: read it as an adversary's file.
	if data, err := readBounded(filepath.Join(dir, contract.PodRestartsDir, GenName(n)), maxGenerationSize); err == nil {
		_ = json.Unmarshal(data, &g)
		g.N = n
	}
	return g
}

// Announce asks for a pod restart on behalf of container source, whose
// workload exited with exitCode during generation observed. It creates
// generation observed+1 and reports won=true, or, when the pod is past
// observed already, creates nothing and returns the pod's current
// generation with won=false: the announcement was stale, the pod restart
// it asked for is already under way. Either way the caller's workload belongs to the
// returned generation once restarted.
func Announce(dir string, observed uint64, source string, exitCode int32) (g Generation, won bool, err error) {
	return AnnounceWith(dir, observed, source, exitCode, nil)
}

// AnnounceWith is Announce with a hook called with the generation number just
// before its file is created, not called when the announcement is stale.
func AnnounceWith(dir string, observed uint64, source string, exitCode int32, before func(n uint64)) (g Generation, won bool, err error) {
	gdir, err := sharedSubdir(dir, contract.PodRestartsDir)
	if err != nil {
		return Generation{}, false, err
	}
	// Old generation files are pruned, so link(2) alone would not notice
	// an announcer far behind; the current number does.
	if cur, err := Current(dir); err != nil {
		return Generation{}, false, err
	} else if cur > observed {
		return ReadGeneration(dir, cur), false, nil
	}
	if observed >= MaxGeneration {
		return Generation{}, false, fmt.Errorf("AnnounceWith pod restart: generation %d is the last one", observed)
	}
	g = Generation{N: observed + 1, Source: source, ExitCode: exitCode, Time: time.Now().UTC()}
	if before != nil {
		before(g.N)
	}
	data, err := json.Marshal(g)
	if err != nil {
		return Generation{}, false, err
	}
	// Relative to a descriptor of pod-restarts/ opened without following
	// a link, so that a link swapped in by another container cannot send
	// the files elsewhere.
	dfd, err := openSubdir(dir, contract.PodRestartsDir, "AnnounceWith")
	if err != nil {
		return Generation{}, false, err
	}
	defer unix.Close(dfd)
	tmp, err := createTempAt(dfd, "AnnounceWith", append(data, '\n'))
	if err != nil {
		return Generation{}, false, err
	}
	defer unix.Unlinkat(dfd, tmp, 0)
	// link(2), unlike rename(2), fails if the name exists: the winner's
	// file appears complete and no one can replace it.
	err = unix.Linkat(dfd, tmp, dfd, GenName(g.N), 0)
	if err != nil {
		err = &os.LinkError{Op: "link", Old: tmp, New: GenName(g.N), Err: err}
	}
	switch {
	case err == nil:
		prune(gdir, g.N)
		return g, true, nil
	case errors.Is(err, os.ErrExist):
		cur, cerr := Current(dir)
		if cerr != nil {
			return Generation{}, false, cerr
		}
		return ReadGeneration(dir, cur), false, nil
	default:
		return Generation{}, false, fmt.Errorf("AnnounceWith pod restart: %w", err)
	}
}

// prune removes generation files, and the round markers of their
// generations, older than the last GenKeep. Errors are ignored: leftovers
// cost a few bytes and never change the current number.
// pod-restarts/ is sticky, so a file another UID announced cannot be
// removed here (EPERM, unless this process has CAP_FOWNER): it stays until
// its owner's next announcement prunes it, which leaves each UID at most
// GenKeep+1 files of its own.
//
// Every removal is relative to the one descriptor the listing was read
// through (unlinkat): a container can put a link to another pod's volume
// in place of pod-restarts/ between the listing and the removals, and the
// node agent, which prunes what it delivers, would remove that pod's
// files through a path.
func prune(gdir string, newest uint64) {
	if newest <= GenKeep {
		return
	}
	f, err := openListing(gdir)
	if err != nil {
		return
	}
	defer f.Close()
	names, err := readNames(f, maxGenEntries)
	if err != nil {
		return
	}
	for _, name := range names {
		n, ok := ParseGenName(name)
		if !ok {
			n, _, _, ok = ParseMarker(name)
		}
		if ok && n+GenKeep < newest {
			unix.Unlinkat(int(f.Fd()), name, 0)
		}
	}
}

// GenerationsDir returns the directory pod restart generations are
// announced in, made shared and sticky if it is not there yet: what a
// member watches for new ones.
func GenerationsDir(dir string) (string, error) {
	return sharedSubdir(dir, contract.PodRestartsDir)
}
