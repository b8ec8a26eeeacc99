// Package upgradefixture gives tests the state a pod of each earlier
// release leaves behind: testdata/upgrade/<release>/, written once by that
// release's own writers (podstate's TestWriteUpgradeFixture) and never
// rewritten, which testdata/upgrade/SHA256SUMS holds to. Every reader of
// the state volume (the next supervisor, the node agent, `restart-supervisor
// status`) and the supervisor's reading of an injected container's
// environment are tested against every release listed there, so a format
// change that would strand a running pod fails a test (docs/upgrading.md).
package upgradefixture

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"testing"
)

// releaseRe is a release's name, as contract.Version gives it.
var releaseRe = regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)$`)

// older orders releases by their numbers.
func older(a, b string) bool {
	ma, mb := releaseRe.FindStringSubmatch(a), releaseRe.FindStringSubmatch(b)
	for i := 1; i <= 3; i++ {
		x, _ := strconv.Atoi(ma[i])
		y, _ := strconv.Atoi(mb[i])
		if x != y {
			return x < y
		}
	}
	return false
}

// Root is the repository's testdata/upgrade.
func Root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("upgradefixture: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "upgrade")
}

// Releases are the releases that have a fixture, oldest first; at least
// one, or the test fails.
func Releases(t testing.TB) []string {
	t.Helper()
	entries, err := os.ReadDir(Root(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && releaseRe.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Slice(out, func(i, j int) bool { return older(out[i], out[j]) })
	if len(out) == 0 {
		t.Fatalf("no release fixture under %s", Root(t))
	}
	return out
}

// Path is a file of a release's fixture.
func Path(t testing.TB, release string, elem ...string) string {
	return filepath.Join(append([]string{Root(t), release}, elem...)...)
}

// CopyState copies a release's state volume into a new directory laid as
// an emptyDir is (its root 0777), and returns it: readers may write, and
// the fixture must stay as it is.
func CopyState(t testing.TB, release string) string {
	t.Helper()
	dst := t.TempDir()
	CopyStateTo(t, release, dst)
	return dst
}

// CopyStateTo is CopyState into dst, which exists.
func CopyStateTo(t testing.TB, release, dst string) {
	t.Helper()
	src := Path(t, release, "state")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			if err := os.MkdirAll(to, 0o777); err != nil {
				return err
			}
			return os.Chmod(to, 0o777)
		}
		if !d.Type().IsRegular() {
			return &fs.PathError{Op: "copy", Path: path, Err: fs.ErrInvalid}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
