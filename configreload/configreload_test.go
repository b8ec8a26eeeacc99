package configreload

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// configWith returns a valid document whose Restart rule matches codes.
func configWith(codes ...int) string {
	vals := make([]string, len(codes))
	for i, c := range codes {
		vals[i] = fmt.Sprint(c)
	}
	return "restartPolicy: Never\nrestartPolicyRules:\n- action: Restart\n  exitCodes:\n    operator: In\n    values: [" +
		strings.Join(vals, ", ") + "]\n"
}

// codes extracts the values of the first rule, the tests' fingerprint.
func codes(c rules.Config) string {
	if len(c.RestartPolicyRules) == 0 || c.RestartPolicyRules[0].ExitCodes == nil {
		return ""
	}
	return fmt.Sprint(c.RestartPolicyRules[0].ExitCodes.Values)
}

// atomicWriter projects files into a directory the way the kubelet's
// AtomicWriter (pkg/volume/util/atomic_writer.go) does for ConfigMap and
// Secret volumes: data in a timestamped directory, ..data a symlink to it,
// each visible file a symlink through ..data, updates by renaming a new
// ..data_tmp symlink over ..data and then removing the old directory.
type atomicWriter struct {
	t   *testing.T
	dir string
}

func (w atomicWriter) write(files map[string]string) {
	w.t.Helper()
	data := filepath.Join(w.dir, "..data")
	old, _ := os.Readlink(data)
	ts, err := os.MkdirTemp(w.dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		w.t.Fatal(err)
	}
	os.Chmod(ts, 0o755)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	for name := range files {
		visible := filepath.Join(w.dir, name)
		if _, err := os.Readlink(visible); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), visible); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(w.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, data); err != nil {
		w.t.Fatal(err)
	}
	if old != "" {
		// Keys no longer projected lose their visible symlink.
		entries, _ := os.ReadDir(filepath.Join(w.dir, old))
		for _, e := range entries {
			if _, ok := files[e.Name()]; !ok {
				os.Remove(filepath.Join(w.dir, e.Name()))
			}
		}
		if err := os.RemoveAll(filepath.Join(w.dir, old)); err != nil {
			w.t.Fatal(err)
		}
	}
}

// recorder collects what a Reloader reports.
type recorder struct {
	reloads chan rules.Config
	errs    chan error
}

func newRecorder() *recorder {
	return &recorder{reloads: make(chan rules.Config, 100), errs: make(chan error, 100)}
}

func (r *recorder) options(poll bool) Options {
	return Options{
		OnReload: func(c rules.Config) { r.reloads <- c },
		OnError:  func(err error) { r.errs <- err },
		Debounce: 20 * time.Millisecond, ForcePoll: poll, PollInterval: 20 * time.Millisecond,
	}
}

// nextReload returns the next configuration delivered and fails on any
// error reported before it.
func (r *recorder) nextReload(t *testing.T) rules.Config {
	t.Helper()
	select {
	case c := <-r.reloads:
		return c
	case err := <-r.errs:
		t.Fatalf("error instead of a reload: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no reload")
	}
	return rules.Config{}
}

func (r *recorder) nextError(t *testing.T) error {
	t.Helper()
	select {
	case c := <-r.reloads:
		t.Fatalf("reload %s instead of an error", codes(c))
	case err := <-r.errs:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("no error reported")
	}
	return nil
}

func modes(t *testing.T, f func(t *testing.T, poll bool)) {
	t.Run("inotify", func(t *testing.T) { f(t, false) })
	t.Run("poll", func(t *testing.T) { f(t, true) })
}

func watch(t *testing.T, path string, opts Options) *Reloader {
	t.Helper()
	r, err := Watch(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	if r.Polling() != opts.ForcePoll {
		t.Fatalf("polling %v, want %v", r.Polling(), opts.ForcePoll)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func TestConfigMapVolumeUpdates(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		dir := t.TempDir()
		kw := atomicWriter{t, dir}
		kw.write(map[string]string{"config.yaml": configWith(42), "other": "x"})
		rec := newRecorder()
		r := watch(t, filepath.Join(dir, "config.yaml"), rec.options(poll))
		if codes(r.Get()) != "[42]" {
			t.Fatalf("initial config %s", codes(r.Get()))
		}

		kw.write(map[string]string{"config.yaml": configWith(42, 43), "other": "x"})
		if c := rec.nextReload(t); codes(c) != "[42 43]" || codes(r.Get()) != "[42 43]" {
			t.Fatalf("after the swap: delivered %s, in force %s", codes(c), codes(r.Get()))
		}

		// An invalid update is rejected; the rules in force stay.
		kw.write(map[string]string{"config.yaml": "restartPolicy: Sometimes\n", "other": "x"})
		err := rec.nextError(t)
		if !strings.Contains(err.Error(), "Sometimes") || !strings.Contains(err.Error(), "restartPolicy") {
			t.Fatalf("error does not name the field and value: %v", err)
		}
		if codes(r.Get()) != "[42 43]" {
			t.Fatalf("invalid update changed the rules to %s", codes(r.Get()))
		}

		// A swap that changes another key only, or rewrites the same
		// content, delivers nothing: the next delivery is the next change.
		kw.write(map[string]string{"config.yaml": configWith(7), "other": "x"})
		if c := rec.nextReload(t); codes(c) != "[7]" {
			t.Fatalf("delivered %s, want [7]", codes(c))
		}
		kw.write(map[string]string{"config.yaml": configWith(7), "other": "y"})
		kw.write(map[string]string{"config.yaml": configWith(7) + "# only a comment\n", "other": "y"})
		kw.write(map[string]string{"config.yaml": configWith(9), "other": "y"})
		if c := rec.nextReload(t); codes(c) != "[9]" {
			t.Fatalf("delivered %s, want [9]", codes(c))
		}

		// The key removed from the ConfigMap: reported, rules kept; back: taken.
		kw.write(map[string]string{"other": "y"})
		if err := rec.nextError(t); !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("missing key: %v", err)
		}
		if codes(r.Get()) != "[9]" {
			t.Fatalf("rules in force %s", codes(r.Get()))
		}
		kw.write(map[string]string{"config.yaml": configWith(1), "other": "y"})
		if c := rec.nextReload(t); codes(c) != "[1]" {
			t.Fatalf("delivered %s, want [1]", codes(c))
		}
		// Only the current timestamped directory is left, as in a volume.
		matches, _ := filepath.Glob(filepath.Join(dir, "..20*"))
		if len(matches) != 1 {
			t.Fatalf("timestamped directories: %v", matches)
		}
	})
}

func TestPlainFileInPlaceWrites(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		path := filepath.Join(t.TempDir(), "restart.yaml")
		os.WriteFile(path, []byte(configWith(42)), 0o644)
		rec := newRecorder()
		r := watch(t, path, rec.options(poll))
		// O_TRUNC then write, as most programs and `cat >` do.
		if err := os.WriteFile(path, []byte(configWith(3)), 0o644); err != nil {
			t.Fatal(err)
		}
		if c := rec.nextReload(t); codes(c) != "[3]" || codes(r.Get()) != "[3]" {
			t.Fatalf("delivered %s, in force %s", codes(c), codes(r.Get()))
		}
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString("backoff: {initial: 1s}\n")
		f.Close()
		if c := rec.nextReload(t); c.Backoff.InitialDelay() != time.Second {
			t.Fatalf("appended backoff not in force: %v", c.Backoff.InitialDelay())
		}
		os.WriteFile(path, []byte("restartPolicy: Never\nrestartPolicyRule: []\n"), 0o644)
		if err := rec.nextError(t); !strings.Contains(err.Error(), "restartPolicyRule") {
			t.Fatalf("unknown key not named: %v", err)
		}
		if codes(r.Get()) != "[3]" {
			t.Fatalf("rules in force %s", codes(r.Get()))
		}
	})
}

func TestRenameOverWrites(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		dir := t.TempDir()
		path := filepath.Join(dir, "restart.yaml")
		os.WriteFile(path, []byte(configWith(42)), 0o644)
		rec := newRecorder()
		r := watch(t, path, rec.options(poll))
		for i := 1; i <= 3; i++ {
			// Editors' safe save: a new file renamed over the old one.
			tmp := filepath.Join(dir, ".restart.yaml.swp")
			os.WriteFile(tmp, []byte(configWith(i)), 0o644)
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			if c := rec.nextReload(t); codes(c) != fmt.Sprintf("[%d]", i) {
				t.Fatalf("delivered %s, want [%d]", codes(c), i)
			}
		}
		// Deleted: reported once, rules kept; created again: taken.
		os.Remove(path)
		if err := rec.nextError(t); !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("deleted file: %v", err)
		}
		if codes(r.Get()) != "[3]" {
			t.Fatalf("rules in force %s", codes(r.Get()))
		}
		os.WriteFile(path, []byte(configWith(5)), 0o644)
		if c := rec.nextReload(t); codes(c) != "[5]" {
			t.Fatalf("delivered %s, want [5]", codes(c))
		}
	})
}

// A config that is a symlink into another directory, edited in place at
// its target, is reloaded although nothing changes in the watched
// directory.
func TestSymlinkTargetEditedInPlace(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		target := filepath.Join(t.TempDir(), "real.yaml")
		os.WriteFile(target, []byte(configWith(42)), 0o644)
		link := filepath.Join(t.TempDir(), "restart.yaml")
		os.Symlink(target, link)
		rec := newRecorder()
		watch(t, link, rec.options(poll))
		os.WriteFile(target, []byte(configWith(8)), 0o644)
		if c := rec.nextReload(t); codes(c) != "[8]" {
			t.Fatalf("delivered %s, want [8]", codes(c))
		}
	})
}

// Many quick writes end with the last content in force, and whatever was
// delivered on the way came in the order written.
func TestBurstOfWrites(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		path := filepath.Join(t.TempDir(), "restart.yaml")
		os.WriteFile(path, []byte(configWith(0)), 0o644)
		rec := newRecorder()
		r := watch(t, path, rec.options(poll))
		// Readers deciding exits while the rules change under them.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						rules.Decide(r.Get().Container, rules.Never, 42)
					}
				}
			}()
		}
		const n = 50
		for i := 1; i <= n; i++ {
			os.WriteFile(path, []byte(configWith(i)), 0o644)
		}
		last, delivered := 0, 0
		for last != n {
			c := rec.nextReloadAllowErrors(t)
			var got int
			fmt.Sscanf(codes(c), "[%d]", &got)
			if got <= last {
				t.Fatalf("delivered %d after %d", got, last)
			}
			last = got
			delivered++
		}
		close(stop)
		wg.Wait()
		if codes(r.Get()) != fmt.Sprintf("[%d]", n) {
			t.Fatalf("in force %s", codes(r.Get()))
		}
		t.Logf("%d writes, %d reloads", n, delivered)
	})
}

// nextReloadAllowErrors skips errors: a read between a truncate and its
// write during a long burst sees an empty file, which is rightly rejected.
func (r *recorder) nextReloadAllowErrors(t *testing.T) rules.Config {
	t.Helper()
	for {
		select {
		case c := <-r.reloads:
			return c
		case err := <-r.errs:
			t.Logf("during the burst: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no reload")
		}
	}
}

func TestWatchRejectsBadStart(t *testing.T) {
	dir := t.TempDir()
	if _, err := Watch(filepath.Join(dir, "absent.yaml"), Options{}); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("restartPolicyRules:\n- action: Restart\n  exitCodes: {operator: In, values: [1]}\n"), 0o644)
	if _, err := Watch(bad, Options{}); err == nil || !strings.Contains(err.Error(), "must specify restartPolicy") {
		t.Fatalf("invalid file: %v", err)
	}
	if _, err := Watch("", Options{}); err == nil {
		t.Fatal("empty path accepted")
	}
}

// A change made between the first read and the start of the watch is not
// lost.
func TestChangeRightAfterStart(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		path := filepath.Join(t.TempDir(), "restart.yaml")
		os.WriteFile(path, []byte(configWith(1)), 0o644)
		rec := newRecorder()
		r := watch(t, path, rec.options(poll))
		os.WriteFile(path, []byte(configWith(2)), 0o644)
		if c := rec.nextReload(t); codes(c) != "[2]" {
			t.Fatalf("delivered %s", codes(c))
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		// After Close nothing is delivered.
		os.WriteFile(path, []byte(configWith(3)), 0o644)
		time.Sleep(100 * time.Millisecond)
		select {
		case c := <-rec.reloads:
			t.Fatalf("reload %s after Close", codes(c))
		default:
		}
	})
}
