package podstate

import (
	"testing"

	"github.com/restart-supervisor/restart-supervisor/rules"
)

// BenchmarkRecorderUpdate is what a restart costs the supervising loop for
// its status document: the write itself happens on another goroutine.
func BenchmarkRecorderUpdate(b *testing.B) {
	r, err := NewRecorder(b.TempDir(), Status{Container: "app"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	rule := 0
	for i := 0; b.Loop(); i++ {
		r.Update(func(s *Status) {
			s.Restarts = i
			s.LastExit = &Exit{Code: 42, Rule: &rule, Action: rules.ActionRestart}
		})
	}
}

// BenchmarkWriteStatus is one synchronous, synced status write.
func BenchmarkWriteStatus(b *testing.B) {
	dir := b.TempDir()
	for i := 0; b.Loop(); i++ {
		if err := WriteStatus(dir, Status{Container: "app", Restarts: i}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnounce is one pod restart announcement (a synced file and a
// link) plus the pruning that follows.
func BenchmarkAnnounce(b *testing.B) {
	dir := b.TempDir()
	var gen uint64
	for b.Loop() {
		g, won, err := Announce(dir, gen, "app", 42)
		if err != nil || !won {
			b.Fatal(err, won)
		}
		gen = g.N
	}
}
