//go:build unix

package statevol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
)

// Group restarts (the RestartGroup action, docs/gang.md) restart every
// container of every pod of a group, across nodes, through the node agent:
// the supervisor has no network code and talks to the agent through the
// state volume only.
//
//  1. A member whose exit matched a RestartGroup rule writes a request,
//     group/request.<container> (podstate's Pod.RequestGroup), and waits.
//  2. The node agent reads it (GroupRequests), records a new generation of
//     the group in the API, and every node agent delivers that generation
//     to the group's pods on its node as a pod restart generation whose
//     file carries the cause (DeliverGroup, Generation.Group). A refusal
//     (the group's budget is spent) is answered in group/answer.<container>
//     (AnswerGroup), and the member hands its exit over.
//  3. Every member of the pod runs the round it runs for RestartAllContainers.
//     Once the pod's members have stopped, they mark the generation
//     "grouped" and wait until the agent marks it "released", which it does
//     when every pod of the group has stopped (GroupStopped, ReleaseGroup):
//     no member of the group starts before all have stopped.
//
// What the agent writes is owned by root, as the agent runs: a generation
// that claims a group cause, or a release, owned by any other UID is
// ignored, so that a container running as another user cannot forge one.
// A container of the pod running as root can; it then restarts its own
// pod's containers, which any container of the pod can disturb anyway
// through the shared volume.

const (
	// GroupReleaseWait bounds a member's wait for the release: the agent
	// releases a group round at the latest after its own bound
	// (nodeagent's group stop wait), so this is reached only without an
	// agent, and then the pod starts as a pod restart would.
	GroupReleaseWait = 90 * time.Second
	// MaxGroupFile bounds a request or an answer: about 200 bytes of JSON.
	MaxGroupFile = 4 << 10
	// MaxGroupRequests is how many request files one read of a pod takes:
	// one per container, and a pod has at most contract.MaxPodMembers.
	MaxGroupRequests = contract.MaxPodMembers
)

// GroupRequest is a member's request for a group restart.
type GroupRequest struct {
	// ID tells this request from the container's earlier ones.
	ID        string `json:"id"`
	Container string `json:"container"`
	ExitCode  int32  `json:"exitCode"`
	// Observed is the group generation the pod had last taken part in
	// (LastGroup): the request asks for the one after it.
	Observed uint64    `json:"observed"`
	Time     time.Time `json:"time"`
}

// GroupAnswer is the node agent's refusal of a request.
type GroupAnswer struct {
	ID      string `json:"id"`
	Refused string `json:"refused"`
}

// readAgentFile reads the file at path as the node agent's: regular, not
// followed, at most max bytes, owned by root, the owner checked on the
// descriptor read from.
func readAgentFile(path string, max int64) ([]byte, error) {
	return boundedfile.ReadAtOwnedBy(unix.AT_FDCWD, path, filepath.Base(path), max, 0)
}

// groupRelease is the content of a release marker: the pod generation it
// releases. A marker is root's, but a container of the pod that made the
// directory it lies in may rename(2) it, root's or not: an older round's
// release renamed to the current round's name says the older round.
type groupRelease struct {
	Generation uint64 `json:"generation"`
}

// GroupReleased reports whether the agent released pod generation n: its
// release marker is root's and names n.
func GroupReleased(dir string, n uint64) bool {
	data, err := readAgentFile(filepath.Join(dir, contract.PodRestartsDir, MarkerName(n, MarkReleased, ReleasedBy)), MaxGroupFile)
	var r groupRelease
	return err == nil && json.Unmarshal(data, &r) == nil && r.Generation == n
}

// AgentGeneration returns pod generation n when the agent delivered it
// for a group restart: its file is root's, says generation n (not an
// older delivery renamed) and carries a group cause.
func AgentGeneration(dir string, n uint64) (Generation, error) {
	name := GenName(n)
	data, err := readAgentFile(filepath.Join(dir, contract.PodRestartsDir, name), maxGenerationSize)
	if err != nil {
		return Generation{}, err
	}
	var g Generation
	switch {
	case json.Unmarshal(data, &g) != nil:
		return Generation{}, fmt.Errorf("%s: not a generation", name)
	case g.N != n:
		return Generation{}, fmt.Errorf("%s: says generation %d", name, g.N)
	case g.Group == nil:
		return Generation{}, fmt.Errorf("%s: no group cause", name)
	}
	return g, nil
}

// RequestGroup writes r, a member's request for a group restart, as the
// request of its container (the node agent's GroupRequests reads it).
func RequestGroup(dir string, r GroupRequest) error {
	if err := CheckContainerName(r.Container); err != nil {
		return err
	}
	data, _ := json.Marshal(r)
	if _, err := sharedSubdir(dir, contract.GroupDir); err != nil {
		return err
	}
	return writeAtomicBeneath(dir, contract.GroupDir, contract.GroupRequestPrefix+r.Container, append(data, '\n'))
}

// AnswerFor reads the agent's answer to container's request (AnswerGroup
// wrote it).
func AnswerFor(dir, container string) (GroupAnswer, error) {
	return readAnswer(filepath.Join(dir, contract.GroupDir, contract.GroupAnswerPrefix+container))
}

// readAnswer reads the agent's answer at path: root's, read from the
// descriptor its owner was checked on.
func readAnswer(path string) (GroupAnswer, error) {
	var a GroupAnswer
	data, err := readAgentFile(path, MaxGroupFile)
	if err != nil {
		return a, err
	}
	err = json.Unmarshal(data, &a)
	return a, err
}

// GroupRequests returns the requests in the pod's state directory dir, at
// most MaxGroupRequests, each read as an adversary's file (regular, not
// followed, capped); a file that cannot be read or parsed is one error.
func GroupRequests(dir string) ([]GroupRequest, []error) {
	gdir := filepath.Join(dir, contract.GroupDir)
	dfd, err := unix.Open(gdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{fmt.Errorf("%s: %w", gdir, err)}
	}
	// The os.File owns the descriptor from here: closing it beside the
	// File would close it twice, the second time (the File's finalizer)
	// under whatever the process has opened with that number since.
	f := os.NewFile(uintptr(dfd), gdir)
	defer f.Close()
	names, err := f.Readdirnames(4 * MaxGroupRequests)
	if err != nil && len(names) == 0 {
		return nil, nil // empty
	}
	var out []GroupRequest
	var errs []error
	for _, name := range names {
		container, ok := strings.CutPrefix(name, contract.GroupRequestPrefix)
		if !ok || CheckContainerName(container) != nil {
			continue
		}
		if len(out) == MaxGroupRequests {
			errs = append(errs, fmt.Errorf("%s: more than %d requests; the rest are not read", gdir, MaxGroupRequests))
			break
		}
		// Read through the listing's descriptor: by its path, the name
		// would be looked up again through whatever the pod has put at
		// group/ since, another pod's volume included.
		data, err := boundedfile.ReadAt(dfd, name, filepath.Join(gdir, name), MaxGroupFile, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r GroupRequest
		if err := json.Unmarshal(data, &r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", filepath.Join(gdir, name), err))
			continue
		}
		r.Container = container // the file name is the authority
		out = append(out, r)
	}
	return out, errs
}

// AnswerGroup writes the agent's refusal of request r.
func AnswerGroup(dir string, r GroupRequest, refused string) error {
	if err := CheckContainerName(r.Container); err != nil {
		return err
	}
	if _, err := sharedSubdir(dir, contract.GroupDir); err != nil {
		return err
	}
	data, _ := json.Marshal(GroupAnswer{ID: r.ID, Refused: clipString(refused, 512)})
	return writeAtomicBeneath(dir, contract.GroupDir, contract.GroupAnswerPrefix+r.Container, append(data, '\n'))
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// groupGenerations returns the pod generations present whose files carry
// a group cause written by the agent, by pod generation.
//
// The listing, the owner checks and the reads all go through one no-follow
// descriptor of pod-restarts/: by their paths, a container that swaps the
// directory for a link would have them look at another pod's volume.
func groupGenerations(dir string) map[uint64]GroupCause {
	out := map[uint64]GroupCause{}
	f, err := openListing(filepath.Join(dir, contract.PodRestartsDir))
	if err != nil {
		return out
	}
	defer f.Close()
	names, err := readNames(f, maxGenEntries)
	if err != nil {
		return out
	}
	dfd := int(f.Fd())
	for _, name := range names {
		n, ok := ParseGenName(name)
		if !ok {
			continue
		}
		// Root's (the agent's), and naming the generation of its name: a
		// delivery renamed is not a delivery.
		data, err := boundedfile.ReadAtOwnedBy(dfd, name, name, maxGenerationSize, 0)
		if err != nil {
			continue
		}
		var g Generation
		if json.Unmarshal(data, &g) == nil && g.N == n && g.Group != nil {
			out[n] = *g.Group
		}
	}
	return out
}

// LastGroup is the highest group generation delivered to the pod, 0 when
// none is present.
func LastGroup(dir string) uint64 {
	var last uint64
	for _, c := range groupGenerations(dir) {
		last = max(last, c.Generation)
	}
	return last
}

// GroupRound returns the pod generation that carries group generation
// groupGen, if it has been delivered.
func GroupRound(dir string, groupGen uint64) (uint64, bool) {
	for n, c := range groupGenerations(dir) {
		if c.Generation == groupGen {
			return n, true
		}
	}
	return 0, false
}

// DeliverGroup makes the pod restart that carries group generation
// cause.Generation, unless the pod already has it or a later one: the node
// agent's delivery, exactly once per pod and group generation. It returns
// the pod generation that carries it.
func DeliverGroup(dir string, cause GroupCause) (n uint64, delivered bool, err error) {
	if cause.Generation == 0 {
		return 0, false, errors.New("deliver group restart: generation 0")
	}
	for k, c := range groupGenerations(dir) {
		if c.Generation >= cause.Generation {
			return k, false, nil
		}
	}
	gdir, err := sharedSubdir(dir, contract.PodRestartsDir)
	if err != nil {
		return 0, false, err
	}
	dfd, err := openSubdir(dir, contract.PodRestartsDir, "deliver")
	if err != nil {
		return 0, false, err
	}
	defer unix.Close(dfd)
	for try := 0; try < 8; try++ {
		cur, err := Current(dir)
		if err != nil {
			return 0, false, err
		}
		if cur >= MaxGeneration {
			return 0, false, fmt.Errorf("deliver group restart: generation %d is the last one", cur)
		}
		g := Generation{N: cur + 1, Source: contract.GroupSource, ExitCode: cause.ExitCode, Time: time.Now().UTC(), Group: &cause}
		data, _ := json.Marshal(g)
		tmp, err := createTempAt(dfd, "deliver", append(data, '\n'))
		if err != nil {
			return 0, false, err
		}
		err = unix.Linkat(dfd, tmp, dfd, GenName(g.N), 0)
		unix.Unlinkat(dfd, tmp, 0)
		if err == nil {
			prune(gdir, g.N)
			return g.N, true, nil
		}
		if err != unix.EEXIST {
			return 0, false, fmt.Errorf("deliver group restart: %w", err)
		}
		// A member announced a pod restart meanwhile: the next number.
	}
	return 0, false, errors.New("deliver group restart: the pod's generation keeps moving")
}

// GroupStopped reports whether the pod's members have stopped for pod
// generation n (a member past the pod's stop barrier marked it grouped).
func GroupStopped(dir string, n uint64) bool {
	names, err := genNames(dir)
	if err != nil {
		return false
	}
	for _, name := range names {
		if k, w, _, ok := ParseMarker(name); ok && k == n && w == MarkGrouped {
			return true
		}
	}
	return false
}

// GroupStarted reports whether the pod's members have started again in pod
// generation n: each member that marked it grouped has marked it started
// (podstate's Member.Started, for n or a later generation).
func GroupStarted(dir string, n uint64) bool {
	names, err := genNames(dir)
	if err != nil {
		return false
	}
	grouped, started := map[string]bool{}, map[string]bool{}
	for _, name := range names {
		k, w, c, ok := ParseMarker(name)
		switch {
		case !ok:
		case w == MarkGrouped && k == n:
			grouped[c] = true
		case w == MarkStarted && k >= n:
			started[c] = true
		}
	}
	for c := range grouped {
		if !started[c] {
			return false
		}
	}
	return len(grouped) > 0
}

// ReleaseGroup lets the pod's members start in pod generation n: every pod
// of the group has stopped (or the agent's bound is over).
func ReleaseGroup(dir string, n uint64) error {
	dfd, err := openSubdir(dir, contract.PodRestartsDir, "release")
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	data, _ := json.Marshal(groupRelease{Generation: n})
	tmp, err := createTempAt(dfd, "release", append(data, '\n'))
	if err != nil {
		return err
	}
	defer unix.Unlinkat(dfd, tmp, 0)
	if err := unix.Linkat(dfd, tmp, dfd, MarkerName(n, MarkReleased, ReleasedBy), 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("release group round %d: %w", n, err)
	}
	return nil
}
