//go:build unix

package statevol

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"golang.org/x/sys/unix"
)

// A marker is a file of pod-restarts/ named <generation>.<what>.<container>:
// one member's word on its part in a pod restart's round, made like a
// generation by link(2) from a complete file and pruned with it.
const (
	// MarkStopped: the member's workload is stopped for the generation.
	MarkStopped = "stopped"
	// MarkStarted: the member's run of the generation has started.
	MarkStarted = "started"
	// MarkFailed: an init container's re-run failed for good; the file
	// holds its exit code.
	MarkFailed = "failed"
	// MarkGrouped: the pod's members have stopped for a group generation
	// (written by each member past the pod's stop barrier).
	MarkGrouped = "grouped"
	// MarkReleased: every pod of the group has stopped; the members may
	// start (written by the node agent, as root).
	MarkReleased = "released"
	// ReleasedBy is the container-name part of a release marker.
	ReleasedBy = "node-agent"
)

// Mark creates container's marker what of generation n, holding data; one
// that exists already is fine (a member marks each step once, and the
// first mark is the one that counts).
func Mark(dir string, n uint64, what, container string, data []byte) error {
	if _, err := sharedSubdir(dir, contract.PodRestartsDir); err != nil {
		return err
	}
	dfd, err := openSubdir(dir, contract.PodRestartsDir, "mark")
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp, err := createTempAt(dfd, "mark", data)
	if err != nil {
		return err
	}
	defer unix.Unlinkat(dfd, tmp, 0)
	if err := unix.Linkat(dfd, tmp, dfd, MarkerName(n, what, container), 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("mark generation %d %s: %w", n, what, err)
	}
	return nil
}

// MarkerData reads what container's marker what of generation n holds, at
// most max bytes, as an adversary's file.
func MarkerData(dir string, n uint64, what, container string, max int64) ([]byte, error) {
	return readBounded(filepath.Join(dir, contract.PodRestartsDir, MarkerName(n, what, container)), max)
}

func MarkerName(n uint64, what, container string) string {
	return GenName(n) + "." + what + "." + container
}

// ParseMarker reads a marker's file name.
func ParseMarker(name string) (n uint64, what, container string, ok bool) {
	if len(name) < 22 || name[20] != '.' {
		return 0, "", "", false
	}
	if n, ok = ParseGenName(name[:20]); !ok {
		return 0, "", "", false
	}
	what, container, ok = strings.Cut(name[21:], ".")
	switch what {
	case MarkStopped, MarkStarted, MarkFailed, MarkGrouped, MarkReleased:
	default:
		ok = false
	}
	if !ok || CheckContainerName(container) != nil {
		return 0, "", "", false
	}
	return n, what, container, true
}

// LatestMarkers returns, per kind of marker (MarkStopped … MarkReleased),
// the containers that have one for generation n or later, each with the
// highest generation it has one for; an unreadable directory has none.
func LatestMarkers(dir string, n uint64) map[string]map[string]uint64 {
	have := map[string]map[string]uint64{MarkStopped: {}, MarkStarted: {}, MarkFailed: {}, MarkGrouped: {}, MarkReleased: {}}
	names, err := genNames(dir)
	if err != nil {
		return have
	}
	for _, name := range names {
		if k, w, c, ok := ParseMarker(name); ok && k >= n && k > have[w][c] {
			have[w][c] = k
		}
	}
	return have
}
