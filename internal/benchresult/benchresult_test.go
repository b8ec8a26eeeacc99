package benchresult

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRecordAppendsOneLinePerFigure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.tsv")
	t.Setenv("BENCH_RESULTS", path)
	Record("start.go-floor.wall_ns", 3052574)
	Record("restart.floor.per_s", 1826.5)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "start.go-floor.wall_ns\t3.052574e+06\nrestart.floor.per_s\t1826.5\n"; string(got) != want {
		t.Fatalf("recorded %q, want %q", got, want)
	}
}

func TestRecordWithoutAFileRecordsNothing(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("BENCH_RESULTS", "")
	Record("size.gofloor_bytes", 1)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("BENCH_RESULTS unset, yet %v written", entries)
	}
}
