package statevol

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/restart-supervisor/restart-supervisor/contract"
)

// FuzzStateFiles feeds arbitrary documents, under arbitrary names, to the
// readers of the state volume, which every container of the pod can write:
// they must not panic, and ReadAll reports each container under its file
// name.
func FuzzStateFiles(f *testing.F) {
	for _, seed := range []struct{ name, doc string }{
		{"app.json", `{"container":"app","state":"running","restarts":1,"lastExit":{"code":1,"signal":"SIGKILL"}}`},
		{"00000000000000000001", `{"generation":1,"source":"app","exitCode":88}`},
		{"18446744073709551615", `{}`}, {"x.json", `garbage`}, {"00000000000000000002", `{"generation":"x"}`},
	} {
		f.Add(seed.name, []byte(seed.doc))
	}
	// One directory for all runs: a fresh one each time costs more than
	// the reading under test.
	dir := f.TempDir()
	for _, sub := range []string{contract.StatusDir, contract.PodRestartsDir} {
		os.Mkdir(filepath.Join(dir, sub), 0o777)
	}
	f.Fuzz(func(t *testing.T, name string, doc []byte) {
		if name == "" || name == "." || name == ".." || len(name) > 255 || filepath.Base(name) != name {
			return
		}
		for _, sub := range []string{contract.StatusDir, contract.PodRestartsDir} {
			p := filepath.Join(dir, sub, name)
			if err := os.WriteFile(p, doc, 0o644); err != nil {
				return // a name the filesystem refuses
			}
			defer os.Remove(p)
		}
		statuses, _ := ReadAll(dir)
		for _, s := range statuses {
			if s.Container+contract.StatusExt != name {
				t.Fatalf("document %q read as container %q", name, s.Container)
			}
		}
		cur, err := Current(dir)
		if err != nil || cur > MaxGeneration {
			t.Fatalf("current %d, %v", cur, err)
		}
		if g := ReadGeneration(dir, cur); g.N != cur {
			t.Fatalf("generation %d read as %d", cur, g.N)
		}
	})
}
