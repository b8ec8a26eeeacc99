package configreload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/restart-supervisor/restart-supervisor/internal/testutil"
	"github.com/restart-supervisor/restart-supervisor/rules"
)

func TestReadFileRefusesWhatIsNotASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero.yaml")
	os.Symlink("/dev/zero", zeroLink)
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, []byte("restartPolicy: Never\n#"+strings.Repeat("x", rules.MaxConfigSize)), 0o644)
	for path, want := range map[string]string{
		fifo:        "not a regular file",
		"/dev/zero": "not a regular file",
		zeroLink:    "not a regular file",
		dir:         "not a regular file",
		big:         "larger than 65536 bytes",
	} {
		err := testutil.Within(t, 5*time.Second, func() error { _, err := ReadFile(path); return err })
		if err == nil || !strings.Contains(err.Error(), want) || len(err.Error()) > 512 {
			t.Errorf("%s: got %v, want %q", path, err, want)
		}
	}
	// A ConfigMap volume's chain of links to a file at the cap is read.
	kw := atomicWriter{t, filepath.Join(dir, "cm")}
	os.Mkdir(kw.dir, 0o755)
	full := "restartPolicy: Never\n#" + strings.Repeat("x", rules.MaxConfigSize-len("restartPolicy: Never\n#"))
	kw.write(map[string]string{"config.yaml": full})
	if data, err := ReadFile(filepath.Join(kw.dir, "config.yaml")); err != nil || string(data) != full {
		t.Fatalf("ConfigMap file: %d bytes, %v", len(data), err)
	}
}

func TestWatchRefusesHostileStart(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	unix.Mkfifo(fifo, 0o644)
	for _, path := range []string{fifo, "/dev/zero"} {
		err := testutil.Within(t, 5*time.Second, func() error { _, err := Watch(path, Options{}); return err })
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// A reload to a FIFO, to /dev/zero or to a huge file is rejected quickly
// with a short error, the rules in force stay, and Close still returns.
func TestReloadRefusesHostileFiles(t *testing.T) {
	modes(t, func(t *testing.T, poll bool) {
		dir := t.TempDir()
		path := filepath.Join(dir, "restart.yaml")
		os.WriteFile(path, []byte(configWith(42)), 0o644)
		rec := newRecorder()
		r := watch(t, path, rec.options(poll))
		replace := func(make func(tmp string) error) {
			t.Helper()
			tmp := filepath.Join(dir, ".next")
			os.Remove(tmp)
			if err := make(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			name, want string
			make       func(tmp string) error
		}{
			{"FIFO", "not a regular file", func(tmp string) error { return unix.Mkfifo(tmp, 0o644) }},
			{"link to /dev/zero", "not a regular file", func(tmp string) error { return os.Symlink("/dev/zero", tmp) }},
			{"100 MiB", "larger than 65536 bytes", func(tmp string) error {
				return os.WriteFile(tmp, []byte(strings.Repeat("restartPolicy: Never\n", 5<<20)), 0o644)
			}},
			{"2000 repeated keys", "Duplicate value", func(tmp string) error {
				return os.WriteFile(tmp, []byte(strings.Repeat("restartPolicy: Never\n", 2000)), 0o644)
			}},
		} {
			replace(tc.make)
			err := rec.nextError(t)
			if !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 2048 {
				t.Errorf("%s: %.300v", tc.name, err)
			}
			if codes(r.Get()) != "[42]" {
				t.Fatalf("%s: rules in force %s", tc.name, codes(r.Get()))
			}
		}
		replace(func(tmp string) error { return os.WriteFile(tmp, []byte(configWith(7)), 0o644) })
		if c := rec.nextReload(t); codes(c) != "[7]" {
			t.Fatalf("delivered %s", codes(c))
		}
		replace(func(tmp string) error { return unix.Mkfifo(tmp, 0o644) })
		rec.nextError(t)
		if err := testutil.Within(t, 5*time.Second, r.Close); err != nil {
			t.Fatal(err)
		}
	})
}
