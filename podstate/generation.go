package podstate

import (
	"fmt"
	"sync"
	"time"

	"github.com/restart-supervisor/restart-supervisor/contract"
	"github.com/restart-supervisor/restart-supervisor/internal/dirwatch"
	"github.com/restart-supervisor/restart-supervisor/statevol"
)

// DefaultPollInterval is how often a watcher without inotify looks.
const DefaultPollInterval = time.Second

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
	c chan statevol.Generation
	// changed is signalled (without blocking, one pending) at every
	// change inotify reports in pod-restarts/: a round's waits look at the
	// markers then, not every barrierPoll.
	changed chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	dw      *dirwatch.Watcher
	once    sync.Once
}

// Watch starts watching for generations above from; pass the generation
// the caller has observed (Current at start-up), so that nothing older is
// replayed and nothing announced since is missed.
func Watch(dir string, from uint64, opts WatchOptions) (*Watcher, error) {
	gdir, err := statevol.GenerationsDir(dir)
	if err != nil {
		return nil, err
	}
	interval := opts.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	w := &Watcher{
		c:       make(chan statevol.Generation, 1),
		changed: make(chan struct{}, 1),
		done:    make(chan struct{}),
		dw:      dirwatch.New(gdir, dirwatch.Options{ForcePoll: opts.ForcePoll, PollInterval: interval}),
	}
	w.wg.Add(1)
	go w.run(dir, from)
	return w, nil
}

// C delivers each new generation once, in increasing order. It holds at
// most one pending generation: when the receiver is late, a newer
// generation replaces the pending one, since one restart answers both.
// Close closes C.
func (w *Watcher) C() <-chan statevol.Generation { return w.c }

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
		n, err := statevol.Current(dir)
		if err != nil || n <= last {
			return
		}
		last = n
		w.deliver(statevol.ReadGeneration(dir, n))
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
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	}
}

func (w *Watcher) deliver(g statevol.Generation) {
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
	if err := statevol.CheckContainerName(container); err != nil {
		return nil, err
	}
	gen, err := statevol.Current(dir)
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
func (m *Member) Announce(exitCode int32) (g statevol.Generation, won bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	observed := m.gen
	for try := 0; ; try++ {
		g, won, err = statevol.AnnounceWith(m.dir, observed, m.name, exitCode, func(n uint64) {
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
func (m *Member) Restarts() <-chan statevol.Generation { return m.w.C() }

// Accept reports whether g asks this container to restart: true the first
// time a generation above the current one is seen, which then becomes the
// current one.
func (m *Member) Accept(g statevol.Generation) bool {
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
