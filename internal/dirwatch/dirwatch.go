// Package dirwatch owns noticing that something in a directory may have
// changed: inotify where it can be set up, polling where it cannot. The
// supervisor watches directories it does not control, a state directory
// shared between the pod's containers and a ConfigMap volume, on kernels
// and in containers where inotify may be missing or its instance limit
// used up; a supervisor that stopped noticing there would be worse than a
// slow one. The webhook watches its serving certificate's Secret volume
// with it for the same reason.
//
// It does not say what changed. Its owner looks again on each signal and
// compares with what it saw last, which also answers the events inotify
// lost on overflow.
package dirwatch

import (
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Options tune a Watcher.
type Options struct {
	// ForcePoll skips inotify and polls.
	ForcePoll bool
	// PollInterval is how often a polling Watcher signals; it must be
	// positive.
	PollInterval time.Duration
}

// Watcher signals on C when its directories may have changed. It either
// watches with inotify or polls, never both, so Polling tells what a
// signal was: an event (or lost events) in a watched directory, or the
// poll interval passing.
type Watcher struct {
	fs     *fsnotify.Watcher // nil when polling
	ticker *time.Ticker      // nil when watching
	c      chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

// New watches dir, or polls when opts.ForcePoll is set or inotify cannot
// be set up for dir. The watch is in place when New returns, so a look
// taken after New misses nothing that a signal would have reported.
func New(dir string, opts Options) *Watcher {
	w := &Watcher{c: make(chan struct{}, 1), done: make(chan struct{})}
	if !opts.ForcePoll {
		if fs, err := fsnotify.NewWatcher(); err == nil {
			if fs.Add(dir) == nil {
				w.fs = fs
			} else {
				fs.Close()
			}
		}
	}
	if w.fs == nil {
		w.ticker = time.NewTicker(opts.PollInterval)
	}
	w.wg.Add(1)
	go w.run()
	return w
}

// C receives a signal when the directories may have changed. Signals
// coalesce: one that is pending when more changes happen stands for all of
// them, and it is received no earlier than the last of them was seen. C is
// not closed.
func (w *Watcher) C() <-chan struct{} { return w.c }

// Polling reports whether the Watcher polls instead of using inotify.
func (w *Watcher) Polling() bool { return w.fs == nil }

// Add also watches dir. A polling Watcher has nothing to add: its owner
// looks at everything it cares about on each signal.
func (w *Watcher) Add(dir string) error {
	if w.fs == nil {
		return nil
	}
	return w.fs.Add(dir)
}

// Remove stops watching dir. It fails when dir is not watched, which
// includes a directory that was deleted: inotify drops its watch itself.
func (w *Watcher) Remove(dir string) error {
	if w.fs == nil {
		return nil
	}
	return w.fs.Remove(dir)
}

// Unwatch removes every inotify watch and keeps the instance, for an
// owner that will need no more signals and is about to exit. Closing an
// inotify instance that still has a watch waits for the kernel to free the
// watch's marks after an SRCU grace period, 8 to 14 ms here, and at exit
// that wait comes before the parent learns of the exit; a watch removed a
// millisecond or more before the instance is closed costs the close about
// 50 µs instead (docs/benchmarks.md). Nothing is signalled afterwards,
// apart from the removal's own event. A polling Watcher has nothing to
// remove.
func (w *Watcher) Unwatch() {
	if w.fs == nil {
		return
	}
	for _, dir := range w.fs.WatchList() {
		_ = w.fs.Remove(dir) // fails only for a directory that is gone, whose watch went with it
	}
}

// Close stops the Watcher and waits for its goroutine to end.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		close(w.done)
		w.wg.Wait()
		if w.fs != nil {
			w.err = w.fs.Close()
		} else {
			w.ticker.Stop()
		}
	})
	return w.err
}

func (w *Watcher) run() {
	defer w.wg.Done()
	var events <-chan fsnotify.Event
	var errs <-chan error
	var tick <-chan time.Time
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	} else {
		tick = w.ticker.C
	}
	for {
		select {
		case <-w.done:
			return
		case _, ok := <-events:
			if !ok {
				return
			}
		case _, ok := <-errs:
			if !ok {
				return
			}
			// Events were lost (queue overflow); looking again finds
			// what they said.
		case <-tick:
		}
		select {
		case w.c <- struct{}{}:
		default: // a signal is pending and covers this one
		}
	}
}
