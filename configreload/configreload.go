// Package configreload owns live reloading of the supervisor's --config
// file: it notices edits, validates the new document with rules.ParseFor and
// makes it the configuration in force, or reports why it was rejected and
// keeps the old one.
//
// It watches the file's directory rather than the file, because editors
// and the kubelet replace files instead of writing them: a ConfigMap volume
// holds config.yaml -> ..data/config.yaml, and an update writes a new
// timestamped directory, points ..data_tmp at it and renames ..data_tmp
// over ..data. A watch on the file (or on the old timestamped directory)
// would never see that. Any event in the directory, or in the directory the
// file resolves to, leads to a re-read; only a change of content counts.
package configreload

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/restart-supervisor/restart-supervisor/internal/boundedfile"
	"github.com/restart-supervisor/restart-supervisor/internal/dirwatch"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

// ReadFile reads a configuration file for the first load and for every
// reload. The supervisor is PID 1: a read that blocks or eats memory stops
// the container, so the file must be a regular file of at most
// rules.MaxConfigSize bytes.
//
// Symbolic links are followed: a ConfigMap volume presents config.yaml as
// a link to ..data/config.yaml, itself a link to the current timestamped
// directory, so refusing links would refuse the common case. The file is
// the pod author's, as are the container's image and command, so a link
// that leads elsewhere gives nothing the author did not have. What is
// refused is the target that is not a regular file (a FIFO would block
// start-up or the exit after a reload, /dev/zero or /dev/urandom would
// never end), found by fstat on the descriptor opened with O_NONBLOCK, so
// that even opening a FIFO without a writer returns at once.
func ReadFile(path string) ([]byte, error) {
	return boundedfile.Read(path, path, rules.MaxConfigSize, true)
}

// Defaults for Options.
const (
	DefaultDebounce = 100 * time.Millisecond
	// emptyFileRereads is how many Debounce periods an empty file may
	// last before it is reported as an invalid config.
	emptyFileRereads    = 10
	DefaultPollInterval = time.Second
)

// Options tune a Reloader. The callbacks run on the reloader's goroutine,
// one at a time; they should log and return.
type Options struct {
	// OnReload receives each new configuration after it took effect.
	OnReload func(rules.Config)
	// OnError receives why a changed file was not taken: unreadable,
	// missing or invalid. The configuration in force stays. A failure is
	// reported once, after it lasted one more Debounce period (a writer
	// that truncates before writing shows an empty file for a moment).
	OnError func(error)
	// Debounce is how quiet the directory must be before the file is read:
	// an editor's truncate-then-write or the kubelet's several renames are
	// one change. Bursts longer than ten times Debounce are read anyway.
	Debounce time.Duration
	// ForcePoll skips inotify and polls; inotify is also skipped when it
	// cannot be set up.
	ForcePoll    bool
	PollInterval time.Duration
	// KubeVersion is the Kubernetes release whose validation the file must
	// pass (rules.ParseFor); zero is the newest.
	KubeVersion rules.KubeVersion
}

// Reloader holds the configuration in force and keeps it current.
type Reloader struct {
	path string
	opts Options
	cfg  atomic.Pointer[rules.Config]

	w        *dirwatch.Watcher
	resolved string // directory the file resolved to, when it differs

	seen string // content (or read error) last evaluated
	// suspect is bad content seen once: reported only if it is still
	// there one quiet period later, since a writer that truncates and
	// then writes shows an empty file for a moment.
	suspect      string
	suspectReads int

	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// Watch reads and validates path and keeps watching it. An error means the
// file cannot be used at start-up (the supervisor exits 2 with it).
func Watch(path string, opts Options) (*Reloader, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if path == "" {
		return nil, fmt.Errorf("--config: no file given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	r := &Reloader{path: abs, opts: opts, done: make(chan struct{})}
	data, err := ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	cfg, err := rules.ParseFor(data, opts.KubeVersion)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	r.cfg.Store(&cfg)
	r.seen = string(data)
	r.w = dirwatch.New(filepath.Dir(abs), dirwatch.Options{ForcePoll: opts.ForcePoll, PollInterval: opts.PollInterval})
	if !r.w.Polling() {
		r.followResolved()
	}
	r.wg.Add(1)
	go r.run()
	return r, nil
}

// Get returns the configuration in force. Decide every exit with what Get
// returns at that moment.
func (r *Reloader) Get() rules.Config { return *r.cfg.Load() }

// Polling reports whether the reloader polls instead of using inotify.
func (r *Reloader) Polling() bool { return r.w.Polling() }

// Unwatch stops reloading and removes the inotify watches, keeping the
// instance until Close, for a supervisor that will decide no more exits:
// the close then does not hold up its exit (dirwatch.Watcher.Unwatch). Get
// goes on returning the configuration in force.
func (r *Reloader) Unwatch() {
	r.once.Do(func() { close(r.done) })
	// The loop may re-add a watch (followResolved) until it has ended.
	r.wg.Wait()
	r.w.Unwatch()
}

// Close stops watching.
func (r *Reloader) Close() error {
	r.once.Do(func() { close(r.done) })
	r.wg.Wait()
	return r.w.Close()
}

// followResolved also watches the directory the file's symlinks lead to,
// so that an in-place write to the target is seen. In a ConfigMap volume
// that is the current timestamped directory, which the kubelet deletes
// after each update; the watch on it then ends by itself.
func (r *Reloader) followResolved() {
	real, err := filepath.EvalSymlinks(r.path)
	if err != nil {
		return
	}
	dir := filepath.Dir(real)
	if dir == filepath.Dir(r.path) || dir == r.resolved {
		return
	}
	if r.resolved != "" {
		_ = r.w.Remove(r.resolved) // fails when the directory is gone
	}
	r.resolved = ""
	if r.w.Add(dir) == nil {
		r.resolved = dir
	}
}

func (r *Reloader) run() {
	defer r.wg.Done()
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	var burstStart time.Time // zero when no change is pending
	changed := func() {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		wait := r.opts.Debounce
		if limit := burstStart.Add(10 * r.opts.Debounce).Sub(now); limit < wait {
			wait = max(limit, 0)
		}
		quiet.Reset(wait)
	}
	// The file may have changed between its first read and the watch.
	if r.read() != r.seen {
		changed()
	}
	for {
		select {
		case <-r.done:
			quiet.Stop()
			return
		case <-r.w.C():
			if !r.w.Polling() {
				// An event, or events lost: wait for the directory
				// to go quiet before reading.
				changed()
			} else if burstStart.IsZero() && r.read() != r.seen {
				// A tick: only a change of content starts a reload.
				changed()
			}
		case <-quiet.C:
			burstStart = time.Time{}
			if r.reload() {
				quiet.Reset(r.opts.Debounce)
			}
			if !r.w.Polling() {
				r.followResolved()
			}
		}
	}
}

// read returns the file's content, or a description of why it cannot be
// read that differs from any content.
func (r *Reloader) read() string {
	data, err := ReadFile(r.path)
	if err != nil {
		return "\x00" + err.Error()
	}
	return string(data)
}

// reload evaluates the file. It returns true when the content is bad but
// may be a write in progress, to be looked at again.
func (r *Reloader) reload() (again bool) {
	content := r.read()
	if content == r.seen {
		r.suspect = ""
		return false
	}
	var err error
	var cfg rules.Config
	if len(content) > 0 && content[0] == 0 {
		// The read error names the file already.
		err = fmt.Errorf("--config: %s; keeping the rules in force", content[1:])
	} else if cfg, err = rules.ParseFor([]byte(content), r.opts.KubeVersion); err != nil {
		err = fmt.Errorf("--config %s: rejected: %w; keeping the rules in force", r.path, err)
	}
	if err != nil {
		if content != r.suspect {
			r.suspect, r.suspectReads = content, 1
			return true
		}
		// An empty file is what an in-place rewrite (truncate, then
		// write) shows in between; on a busy node the write can come
		// well after one Debounce, so it gets a few more looks before it
		// is reported.
		if r.suspectReads++; content == "" && r.suspectReads <= emptyFileRereads {
			return true
		}
		r.suspect, r.seen = "", content
		if r.opts.OnError != nil {
			r.opts.OnError(err)
		}
		return false
	}
	r.suspect, r.seen = "", content
	if sameConfig(cfg, r.Get()) {
		return false // comments or formatting changed
	}
	r.cfg.Store(&cfg)
	if r.opts.OnReload != nil {
		r.opts.OnReload(cfg)
	}
	return false
}

// sameConfig reports whether a and b are the same configuration: the same
// document in the injector's JSON form (Config.Marshal), which keeps every
// field that changes a decision and drops only differences without effect,
// such as an empty list against no list. It stands in for reflect.DeepEqual,
// whose code the supervisor binary would otherwise carry for this one call.
func sameConfig(a, b rules.Config) bool {
	ja, err := a.Marshal()
	if err != nil {
		return false
	}
	jb, err := b.Marshal()
	return err == nil && bytes.Equal(ja, jb)
}
