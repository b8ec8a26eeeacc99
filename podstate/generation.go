package podstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/dirwatch"
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
	// genKeep is how many older generation files an announcer leaves for
	// inspection; only the newest is ever needed.
	genKeep = 8
	// DefaultPollInterval is how often a watcher without inotify looks.
	DefaultPollInterval = time.Second
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

func genName(n uint64) string { return fmt.Sprintf("%020d", n) }

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
		if n, ok := parseGenName(name); ok && n > max {
			max = n
		}
	}
	return max, nil
}

// parseGenName returns the generation a file name stands for, if any.
func parseGenName(name string) (uint64, bool) {
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
	if data, err := readBounded(filepath.Join(dir, contract.PodRestartsDir, genName(n)), maxGenerationSize); err == nil {
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
	return announce(dir, observed, source, exitCode, nil)
}

// announce is Announce with a hook called with the generation number just
// before its file is created, not called when the announcement is stale.
func announce(dir string, observed uint64, source string, exitCode int32, before func(n uint64)) (g Generation, won bool, err error) {
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
		return Generation{}, false, fmt.Errorf("announce pod restart: generation %d is the last one", observed)
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
	dfd, err := openSubdir(dir, contract.PodRestartsDir, "announce")
	if err != nil {
		return Generation{}, false, err
	}
	defer unix.Close(dfd)
	tmp, err := createTempAt(dfd, "announce", append(data, '\n'))
	if err != nil {
		return Generation{}, false, err
	}
	defer unix.Unlinkat(dfd, tmp, 0)
	// link(2), unlike rename(2), fails if the name exists: the winner's
	// file appears complete and no one can replace it.
	err = unix.Linkat(dfd, tmp, dfd, genName(g.N), 0)
	if err != nil {
		err = &os.LinkError{Op: "link", Old: tmp, New: genName(g.N), Err: err}
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
		return Generation{}, false, fmt.Errorf("announce pod restart: %w", err)
	}
}

// prune removes generation files, and the round markers of their
// generations, older than the last genKeep. Errors are ignored: leftovers
// cost a few bytes and never change the current number.
// pod-restarts/ is sticky, so a file another UID announced cannot be
// removed here (EPERM, unless this process has CAP_FOWNER): it stays until
// its owner's next announcement prunes it, which leaves each UID at most
// genKeep+1 files of its own.
func prune(gdir string, newest uint64) {
	if newest <= genKeep {
		return
	}
	names, err := listNames(gdir, ".", maxGenEntries)
	if err != nil {
		return
	}
	for _, name := range names {
		n, ok := parseGenName(name)
		if !ok {
			n, _, _, ok = parseMarker(name)
		}
		if ok && n+genKeep < newest {
			os.Remove(filepath.Join(gdir, name))
		}
	}
}

// WatchOptions tune a Watcher.
type WatchOptions struct {
	// ForcePoll skips inotify and polls; inotify is also skipped when it
	// cannot be set up (no inotify, or the instance limit reached).
	ForcePoll bool
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
}

// PodRestartWatch says how a supervisor watches pod-restarts/. A process
// that holds an inotify watch when it exits is reaped about 9 ms later
// (the kernel frees the watch's marks after an SRCU grace period; see
// docs/benchmarks.md). Pod.Observe removes the watch when the supervisor
// stops or exits, which spares most of that when there is time before the
// exit; holding no watch spares it always, and costs less still. A watch
// is held only where a pod restart is expected: in a pod with a member list
// (contract.EnvPodMembers, which the injector and compose set exactly for
// a pod whose rules use RestartAllContainers), or when the container's own
// rules announce pod restarts. Anywhere else, an injected pod without
// RestartAllContainers or a container wrapped by hand without a member
// list, pod-restarts/ is looked at every DefaultPollInterval, so a
// follower there still follows, within that interval.
func PodRestartWatch(members []contract.PodMember, announces bool) WatchOptions {
	return WatchOptions{ForcePoll: members == nil && !announces}
}

// Watcher delivers the pod's new restart generations.
type Watcher struct {
	c    chan Generation
	done chan struct{}
	wg   sync.WaitGroup
	dw   *dirwatch.Watcher
	once sync.Once
}

// Watch starts watching for generations above from; pass the generation
// the caller has observed (Current at start-up), so that nothing older is
// replayed and nothing announced since is missed.
func Watch(dir string, from uint64, opts WatchOptions) (*Watcher, error) {
	gdir, err := sharedSubdir(dir, contract.PodRestartsDir)
	if err != nil {
		return nil, err
	}
	interval := opts.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	w := &Watcher{
		c:    make(chan Generation, 1),
		done: make(chan struct{}),
		dw:   dirwatch.New(gdir, dirwatch.Options{ForcePoll: opts.ForcePoll, PollInterval: interval}),
	}
	w.wg.Add(1)
	go w.run(dir, from)
	return w, nil
}

// C delivers each new generation once, in increasing order. It holds at
// most one pending generation: when the receiver is late, a newer
// generation replaces the pending one, since one restart answers both.
// Close closes C.
func (w *Watcher) C() <-chan Generation { return w.c }

// Polling reports whether the watcher polls instead of using inotify.
func (w *Watcher) Polling() bool { return w.dw.Polling() }

// unwatch stops noticing new generations without closing the watcher
// (dirwatch.Watcher.Unwatch), so that the close at exit does not wait.
func (w *Watcher) unwatch() { w.dw.Unwatch() }

// Close stops the watcher, waits for it to finish and closes C.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.done)
		w.wg.Wait()
		close(w.c)
		err = w.dw.Close()
	})
	return err
}

func (w *Watcher) run(dir string, last uint64) {
	defer w.wg.Done()
	scan := func() {
		n, err := Current(dir)
		if err != nil || n <= last {
			return
		}
		last = n
		w.deliver(ReadGeneration(dir, n))
	}
	// The watch is in place before this first look, so a generation made
	// between the caller's Current and Watch is seen here.
	scan()
	for {
		select {
		case <-w.done:
			return
		case <-w.dw.C():
			scan()
		}
	}
}

func (w *Watcher) deliver(g Generation) {
	select {
	case w.c <- g:
		return
	default:
	}
	select {
	case <-w.c:
	default:
	}
	// This goroutine is the only sender, so the slot is free now.
	w.c <- g
}

// Member is one container's part in pod restarts: it knows the generation
// the container's current run belongs to, announces with it, and accepts
// each newer generation exactly once.
//
// Call Announce and Accept from the goroutine that owns the workload, at
// the moment the exit or the restart is handled, not where the generation
// was received: whether a generation still asks for a restart depends on
// what the workload did in between. An exit handled first announces (or
// learns of) the generation and restarts into it, so the delivery that
// follows is not accepted; a generation handled first restarts the
// workload, and the exit that the kill causes is not announced. The
// methods are safe for concurrent use, but only that ordering gives
// exactly-once.
type Member struct {
	dir, name string
	w         *Watcher
	mu        sync.Mutex
	gen       uint64
	round     roundConfig

	unwatchOnce sync.Once
}

// Join reads the pod's current generation (the one the container starts
// in: a container started late does not replay earlier pod restarts) and
// watches for newer ones.
func Join(dir, container string, opts WatchOptions) (*Member, error) {
	if err := CheckContainerName(container); err != nil {
		return nil, err
	}
	gen, err := Current(dir)
	if err != nil {
		return nil, err
	}
	w, err := Watch(dir, gen, opts)
	if err != nil {
		return nil, err
	}
	return &Member{dir: dir, name: container, w: w, gen: gen}, nil
}

// Generation returns the generation of the container's current run.
func (m *Member) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// Announce asks for a pod restart because the workload exited with
// exitCode and its first matching rule says RestartAllContainers. Whether
// it won or not, the caller restarts its own workload once, which then
// belongs to g.N; the same generation arriving later on Restarts is not
// accepted again.
//
// A generation already present that does not pass Verify (another
// container created it under a name that did not announce it) is not
// taken as the pod restart under way: the announcement goes on to the
// next number, a few times at most.
func (m *Member) Announce(exitCode int32) (g Generation, won bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	observed := m.gen
	for try := 0; ; try++ {
		g, won, err = announce(m.dir, observed, m.name, exitCode, func(n uint64) {
			if m.round.beforeAnnounce != nil {
				m.round.beforeAnnounce(n, exitCode)
			}
		})
		if err != nil || won || try == 3 {
			break
		}
		// Under the lock: verify, which does not take it again.
		verr := m.verify(g, m.gen)
		if g.Source == m.name {
			// This container's document says it announced g.N (just
			// now, before the link that failed), but the file is
			// someone else's.
			verr = fmt.Errorf("generation %d names this container, which did not create it", g.N)
		}
		if verr == nil {
			break
		}
		m.round.logf("a generation above this container's is not a valid pod restart; announcing the next one", "generation", g.N, "err", verr)
		observed = g.N
	}
	if err == nil && g.N > m.gen {
		m.gen = g.N
	}
	return g, won, err
}

// Restarts delivers generations announced by any container of the pod;
// Close closes it. Pass each to Accept.
func (m *Member) Restarts() <-chan Generation { return m.w.C() }

// Accept reports whether g asks this container to restart: true the first
// time a generation above the current one is seen, which then becomes the
// current one.
func (m *Member) Accept(g Generation) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g.N <= m.gen {
		return false
	}
	m.gen = g.N
	return true
}

// Polling reports whether pod restarts are found by polling.
func (m *Member) Polling() bool { return m.w.Polling() }

// Close stops watching.
func (m *Member) Close() error { return m.w.Close() }

// unwatch removes the inotify watch on pod-restarts/ ahead of Close, once
// no pod restart can change what the container does.
func (m *Member) unwatch() { m.unwatchOnce.Do(m.w.unwatch) }
