package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// README's table and docs/benchmarks.md's latest run are what the
// committed run's figures make: a hand edit of either, or a new run whose
// documents were not regenerated, fails here.
func TestDocumentsMatchTheRun(t *testing.T) {
	stale, err := run("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Fatalf("%v differ from docs/benchmarks-run.tsv: run go run ./bench/measured -write", stale)
	}
}

// A run that lost a figure must say which, not print a zero.
func TestMissingFigureIsNamed(t *testing.T) {
	data, err := os.ReadFile("../../docs/benchmarks-run.tsv")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "start.go-floor.wall_ns\t") {
			kept = append(kept, line)
		}
	}
	r, err := parse([]byte(strings.Join(kept, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.readmeTable(); err == nil || !strings.Contains(err.Error(), "start.go-floor.wall_ns") {
		t.Fatalf("readmeTable without go-floor: %v", err)
	}
	if _, err := r.latestRun(); err == nil || !strings.Contains(err.Error(), "start.go-floor.wall_ns") {
		t.Fatalf("latestRun without go-floor: %v", err)
	}
}

func TestMalformedLineIsRefused(t *testing.T) {
	if _, err := parse([]byte("meta.date\t2026\nno tab here\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("parse: %v", err)
	}
}

func TestMarkersAreRequired(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"docs/benchmarks-run.tsv", "docs/benchmarks.md"} {
		data, err := os.ReadFile(filepath.Join("../..", f))
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# no table here\n"), 0o644)
	if _, err := run(dir, true); err == nil || !strings.Contains(err.Error(), "README.md: no") {
		t.Fatalf("run without README markers: %v", err)
	}
}
