package upgradefixture

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var updateSums = flag.Bool("update-sums", false, "add the fixture files SHA256SUMS does not list yet (never changes a listed one)")

// TestFixturesAreNeverRewritten: every file of testdata/upgrade is listed
// in SHA256SUMS with the digest it was added with. A release's fixture is
// what pods of that release really left; changing it would make the
// readers' tests pass against a state no pod has. A format change adds a
// release directory (and, with -update-sums, its lines).
func TestFixturesAreNeverRewritten(t *testing.T) {
	root := Root(t)
	sumsPath := filepath.Join(root, "SHA256SUMS")
	listed := map[string]string{}
	b, err := os.ReadFile(sumsPath)
	if err != nil && !(*updateSums && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		sum, path, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %d: %q is not \"<sha256>  <path>\"", i+1, line)
		}
		listed[path] = sum
	}
	found := map[string]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == sumsPath {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		h := sha256.Sum256(data)
		found[filepath.ToSlash(rel)] = hex.EncodeToString(h[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, sum := range listed {
		switch got, ok := found[path]; {
		case !ok:
			t.Errorf("%s is listed in SHA256SUMS but gone: a release's fixture is never removed", path)
		case got != sum:
			t.Errorf("%s changed (sha256 %s, listed %s): a release's fixture is never rewritten; add a new release's instead", path, got, sum)
		}
	}
	var added []string
	for path, sum := range found {
		if _, ok := listed[path]; !ok {
			added = append(added, fmt.Sprintf("%s  %s", sum, path))
		}
	}
	sort.Strings(added)
	if len(added) == 0 {
		return
	}
	if !*updateSums {
		t.Errorf("not in SHA256SUMS (go test ./internal/upgradefixture -update-sums adds them):\n%s", strings.Join(added, "\n"))
		return
	}
	if t.Failed() {
		return
	}
	var lines []string
	for path, sum := range listed {
		lines = append(lines, fmt.Sprintf("%s  %s", sum, path))
	}
	lines = append(lines, added...)
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	if err := os.WriteFile(sumsPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("added %d files to SHA256SUMS", len(added))
}

// TestReleasesAreFound: the readers' tests run over at least the first
// release, oldest first.
func TestReleasesAreFound(t *testing.T) {
	rs := Releases(t)
	if rs[0] != "v0.1.0" {
		t.Errorf("releases %v, want v0.1.0 first", rs)
	}
	if !older("v0.9.0", "v0.10.0") || older("v1.0.0", "v0.10.0") {
		t.Error("older orders by numbers, not text")
	}
}
