package dirwatch

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// quiet is how long a test waits to conclude that no signal is coming.
// It only bounds how long a wrong signal may take to be noticed; a correct
// Watcher passes however slow the machine.
const quiet = 300 * time.Millisecond

func newInotify(t *testing.T, dir string) *Watcher {
	t.Helper()
	w := New(dir, Options{PollInterval: time.Hour})
	t.Cleanup(func() { w.Close() })
	if w.Polling() {
		if os.Getenv("CI") == "true" {
			t.Fatal("inotify cannot be set up")
		}
		t.Skip("inotify cannot be set up here")
	}
	return w
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("no signal after %s", what)
	}
}

// drain takes signals until none has come for a while, so that the next
// one is known to come from what the test does next.
func drain(w *Watcher) {
	for {
		select {
		case <-w.C():
		case <-time.After(quiet):
			return
		}
	}
}

func noSignal(t *testing.T, w *Watcher, what string) {
	t.Helper()
	select {
	case <-w.C():
		t.Fatalf("signal after %s", what)
	case <-time.After(quiet):
	}
}

func TestEventOnCreate(t *testing.T) {
	dir := t.TempDir()
	w := newInotify(t, dir)
	noSignal(t, w, "nothing happened")
	touch(t, filepath.Join(dir, "f"))
	waitSignal(t, w, "creating a file")
}

func TestSignalsCoalesce(t *testing.T) {
	dir := t.TempDir()
	w := newInotify(t, dir)
	for i := range 50 {
		touch(t, filepath.Join(dir, fmt.Sprint("f", i)))
	}
	waitSignal(t, w, "50 writes")
	drain(w)
	noSignal(t, w, "draining")
}

func TestPollingSignalsOnTick(t *testing.T) {
	w := New(t.TempDir(), Options{ForcePoll: true, PollInterval: 20 * time.Millisecond})
	defer w.Close()
	if !w.Polling() {
		t.Fatal("ForcePoll: Polling() = false")
	}
	// Nothing changes in the directory: each signal is a tick.
	for i := range 3 {
		waitSignal(t, w, fmt.Sprint("poll interval ", i+1))
	}
	if err := w.Add(t.TempDir()); err != nil {
		t.Errorf("Add while polling: %v", err)
	}
}

func TestPollsWhenInotifyCannotWatch(t *testing.T) {
	w := New(filepath.Join(t.TempDir(), "missing"), Options{PollInterval: 20 * time.Millisecond})
	defer w.Close()
	if !w.Polling() {
		t.Fatal("a directory that does not exist cannot be watched: Polling() = false")
	}
	waitSignal(t, w, "a poll interval")
}

func TestAddRemove(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	w := newInotify(t, dir)
	touch(t, filepath.Join(other, "before-add"))
	noSignal(t, w, "a write in a directory not yet added")

	if err := w.Add(other); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(other, "added"))
	waitSignal(t, w, "a write in the added directory")
	drain(w)

	if err := w.Remove(other); err != nil {
		t.Fatal(err)
	}
	drain(w) // inotify reports the removal of its watch
	touch(t, filepath.Join(other, "removed"))
	noSignal(t, w, "a write in the removed directory")
	touch(t, filepath.Join(dir, "still-watched"))
	waitSignal(t, w, "a write in the first directory after Remove")

	if err := w.Remove(other); err == nil {
		t.Error("removing a directory twice: no error")
	}
}

// watcherGoroutines counts the goroutines New started that are still alive.
// One not yet scheduled shows a wrapper function, not run, so they are
// counted by their creator.
func watcherGoroutines() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "created by github.com/restart-supervisor/restart-supervisor/internal/dirwatch.New in goroutine")
}

func TestCloseStopsGoroutine(t *testing.T) {
	for _, poll := range []bool{false, true} {
		dir := t.TempDir()
		before := watcherGoroutines()
		w := New(dir, Options{ForcePoll: poll, PollInterval: 10 * time.Millisecond})
		if n := watcherGoroutines(); n != before+1 {
			t.Fatalf("poll=%v: %d watcher goroutines after New, want %d", poll, n, before+1)
		}
		if err := w.Close(); err != nil {
			t.Errorf("poll=%v: Close: %v", poll, err)
		}
		// Close waits for the goroutine, so it is gone now, not eventually.
		if n := watcherGoroutines(); n != before {
			t.Fatalf("poll=%v: %d watcher goroutines after Close, want %d", poll, n, before)
		}
		drain(w)
		touch(t, filepath.Join(dir, "after-close"))
		noSignal(t, w, "Close")
		if err := w.Close(); err != nil {
			t.Errorf("poll=%v: second Close: %v", poll, err)
		}
	}
}

// TestUnwatchRemovesEveryWatch: Unwatch leaves the inotify instance open
// with no watch on it (what spares the owner's exit the kernel's wait),
// and Close still ends the Watcher.
func TestUnwatchRemovesEveryWatch(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	w := newInotify(t, dir)
	if err := w.Add(other); err != nil {
		t.Fatal(err)
	}
	if n := len(w.fs.WatchList()); n != 2 {
		t.Fatalf("%d watches before Unwatch, want 2", n)
	}
	w.Unwatch()
	if l := w.fs.WatchList(); len(l) != 0 {
		t.Fatalf("watches left after Unwatch: %q", l)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
